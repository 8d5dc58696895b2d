"""Your run against ours: a run directory set beside the suite entry it repeats.

    python -m benchmark.compare RUN_DIR [RUN_DIR ...]            a line per run, and compare.png
    python -m benchmark.compare runs/my_sweep --out sweep.png    every run under a directory
    python -m benchmark.compare RUN_DIR --anyway                 compare though the flags differ
    python -m benchmark.compare RUN_DIR --overwrite              replace compare.png if it exists

A run directory is what a vibe_rl script writes (args.json, eval.json, metrics.jsonl); a directory
without args.json stands for every run directory below it (a sweep's, or an --output-dir). Each
run is matched to the entry in docs/results/ with its script, env and budget (--total-timesteps);
its algorithm flags (args.json less the run flags: seeds, directories, logging) are compared with
the ones the entry's run recorded, and any that differ are named. A run that matches no entry, or
whose flags differ (without --anyway), is said in one line and the exit status is 2.

For each run it prints its score (its final evaluation, or for a `score = "training"` entry its
last tenth of training returns), our IQM [95% CI] over the entry's seeds, and whether the score
lies below, within or above our seeds' range; the PNG plots its evaluation (dashed) and training
(solid) curves over our seeds' mean and 95% band, one panel per entry; the last line says where
it is. A plot is never replaced silently: where --out (compare.png) exists, the lines are printed,
the plot is not written, and the exit status is 2, unless --overwrite. Nothing is written into
the run directories.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

from benchmark.export import find_run_dirs
from benchmark.results import (
    RESULTS_DIR,
    RUN_KEYS,
    as_result,
    ci_text,
    eval_curve,
    learning_curve,
    load_records,
    pyplot,
    read_args,
    training_score,
)
from benchmark.stats import mean_ci_band


class Match(NamedTuple):
    """A user's run and the entry it repeats (a docs/results/ record, as an `entry_result` dict)."""

    run_dir: Path
    entry: dict[str, Any] | None  # None: no entry has this script, env and budget
    differ: list[str]  # "--flag RUN (ours OURS)", for each algorithm flag that differs


def algorithm_args(args: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in args.items() if key not in RUN_KEYS}


def flag_differences(run: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    differ = []
    for key in sorted(set(run) | set(ours)):
        if run.get(key) != ours.get(key):
            differ.append(f"--{key.replace('_', '-')} {run.get(key)} (ours {ours.get(key)})")
    return differ


def match(run_dir: Path, entries: list[dict[str, Any]]) -> Match:
    """The entry with the run's script, env and budget whose flags differ least from the run's."""
    args = read_args(run_dir)
    script = Path(args.get("script", "")).stem
    same = [
        e
        for e in entries
        if Path(e["script"]).stem == script
        and e["env"] == args.get("env_id")
        and e["total_timesteps"] == args.get("total_timesteps")
    ]
    if not same:
        return Match(run_dir, None, [])
    run = algorithm_args(args)
    best = min(same, key=lambda e: len(flag_differences(run, algorithm_args(e["args"]))))
    return Match(run_dir, best, flag_differences(run, algorithm_args(best["args"])))


def run_score(run_dir: Path, entry: dict[str, Any]) -> float | None:
    if entry.get("score") == "training":
        return training_score(run_dir) if (run_dir / "metrics.jsonl").is_file() else None
    path = run_dir / "eval.json"
    return json.loads(path.read_text())["mean"] if path.is_file() else None


def verdict(score: float, seeds: list[float]) -> str:
    score = float(f"{score:.6g}")  # as the data keeps a score (benchmark/results.py)
    if score < min(seeds):
        return "below"
    return "above" if score > max(seeds) else "within"


def line(m: Match, score: float | None) -> str:
    e = m.entry
    ours = (
        f"ours ({e['name']} on {e['env']}, {e['total_timesteps']:,} steps, {e['seeds']} seeds): "
        f"IQM {ci_text(e['iqm'], e['iqm_ci95'])}, seeds {min(e['seed_eval_means']):.2f} to "
        f"{max(e['seed_eval_means']):.2f}"
    )
    if score is None:
        return f"{m.run_dir.name}: no final evaluation yet; {ours}"
    return f"{m.run_dir.name}: {score:.2f}, {verdict(score, e['seed_eval_means'])} our seeds' range; {ours}"


def plot(matches: list[Match], out: Path) -> Path:
    """One panel per entry: our seeds' mean and 95% band (training solid, evaluation dashed), and
    each run's own curves over them."""
    plt = pyplot()
    entries = {id(m.entry): m.entry for m in matches}
    fig, axes = plt.subplots(len(entries), 1, figsize=(7, 4.2 * len(entries)), squeeze=False)
    for ax, entry in zip(axes[:, 0], entries.values(), strict=True):
        for kind, curves, style in (("train", entry["curves"], "-"), ("eval", entry["eval_curves"], "--")):
            grid, mean, low, high = mean_ci_band([c for c in curves if len(c[0]) > 1])
            if len(grid) > 1:
                ax.plot(grid, mean, style, color="tab:blue", label=f"ours, {kind} ({entry['seeds']} seeds)")
                ax.fill_between(grid, low, high, color="tab:blue", alpha=0.15)
        mine = [m for m in matches if m.entry is entry]
        colors = plt.get_cmap("tab10").colors[1:]
        for i, m in enumerate(mine):
            color = colors[i % len(colors)]
            eval_path = m.run_dir / "eval.json"
            for (steps, values), style, kind in (
                (learning_curve(m.run_dir), "-", "train"),
                (
                    eval_curve(json.loads(eval_path.read_text())) if eval_path.is_file() else ([], []),
                    "--",
                    "eval",
                ),
            ):
                if steps:
                    name = m.run_dir.name.removeprefix(entry["env"].replace("/", "-") + "__")  # as written
                    marker = "o" if len(steps) < 3 else None  # no --eval-frequency: the final point
                    ax.plot(steps, values, style, color=color, marker=marker, label=f"{name} {kind}")
        ax.set(
            title=f"{entry['name']} on {entry['env']}\nyour runs over our seeds' mean and 95% band",
            xlabel="env steps",
            ylabel="episodic return",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.compare", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", help="run directories, or directories holding them")
    parser.add_argument(
        "--out", type=Path, default=Path("compare.png"), help="the plot (default compare.png, here)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument(
        "--anyway", action="store_true", help="compare a run whose flags differ from the entry's"
    )
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="the data (default docs/results/)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.run_dirs if not p.is_dir()]
    if missing:
        print(f"not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    run_dirs = find_run_dirs(args.run_dirs)
    if not run_dirs:
        print(
            f"no run directory (one with args.json) in {', '.join(map(str, args.run_dirs))}", file=sys.stderr
        )
        return 2
    entries = [as_result(record) for record in load_records(args.results)]
    compared, status = [], 0
    for m in (match(d, entries) for d in run_dirs):
        if m.entry is None:
            a = read_args(m.run_dir)
            print(
                f"{m.run_dir.name}: we have no row of {a.get('script')} on {a.get('env_id')} at "
                f"{a.get('total_timesteps'):,} steps (docs/results.md lists our rows)"
            )
            status = 2
            continue
        if m.differ:
            said = f"{m.run_dir.name}: its flags differ from {m.entry['name']}'s on {m.entry['env']}: "
            print(
                said + "; ".join(m.differ) + ("" if args.anyway else " (--anyway compares it all the same)")
            )
            if not args.anyway:
                status = 2
                continue
        compared.append(m)
        print(line(m, run_score(m.run_dir, m.entry)))
    if compared and args.out.exists() and not args.overwrite:
        print(f"the plot is not written: {args.out} exists (--out another path, or --overwrite)")
        return 2
    if compared:
        replaced = args.out.exists()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot(compared, args.out)
        print(f"{'replaced' if replaced else 'wrote'} the plot: {args.out.resolve()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
