"""Results: run directories read back, their figures, the runner's report, and the page to cite.

    python -m benchmark --full --record          run entries, keep each one's data, regenerate the page
    python -m benchmark --results-doc            docs/results.md (and its curve images) from docs/results/
    python -m benchmark --results-doc --check    exit 1 if docs/results.md is not what the data gives

What a run directory holds (eval.json, metrics.jsonl, args.json) is read here; so are the
figures made of it, for the runner's report (results.json, results.md, curves_{env}.png,
profile.png, and docs/benchmarks.md's block with --docs) and for the page, docs/results.md.

Definitions:
- score: a seed's eval.json "mean", its final deterministic evaluation (the mean return of
  --eval-episodes episodes); with `score = "training"` (Craftax: its scoreboard's unit, and
  greedy policies there score below random), the mean training return (charts/episodic_return)
  of its last tenth of logged points. eval return: the mean over seeds of the scores, +- their std.
- IQM [95% CI]: the interquartile mean of the seeds' scores (trim_mean(x, 0.25): with 3 seeds
  or fewer, the mean) and its 95% percentile bootstrap interval over the seeds (2000
  resamples, benchmark/stats.py). An entry passes when its IQM reaches its threshold; an entry
  with `below = true` (a contrast: a script that must fail where another succeeds, e.g. a
  feed-forward policy on a task that needs memory) passes when its IQM stays below it, and has
  no normalised score (it is left out of the per-script aggregates and profiles).
- normalised: (score - random) / (threshold - random): the random policy's return (suite.toml's
  [random]) is 0 and the entry's threshold, the reference, is 1 (the quick preset's own
  threshold in --quick). Per script: the IQM of the normalised scores of all its runs, every
  env's seeds pooled, with a stratified bootstrap CI (seeds resampled within each env), as in
  Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice".
- compile s: the sum of the "compiled ... in X.Xs" lines the script prints.
- env steps/s: training throughput summed over seeds = seeds x the median of the run's
  logged charts/SPS (each chunk's steps / its time: compile, start-up and the final
  evaluation excluded); where a script logs no charts/SPS, total steps x seeds / (wall -
  compile). The evaluations at --eval-frequency run while the next chunk is in flight and
  share its device: they lower charts/SPS (quick PPO CartPole-v1, 2026-11-25: ~100k instead
  of ~150k-190k steps/s); `--eval-points 0` measures speed without them.
- ceiling: random-action gymnax stepping in one compiled scan (benchmark/ceiling.py) at
  num_envs x seeds parallel envs, the same number the vmapped program steps.

Results as data: one JSON file per full suite entry (script, env, variant) in docs/results/:
{script}__{env}[__{variant}].json, the env's "/" written "-". A file holds the entry as it ran
(its exact command, budget, threshold and its source, the random policy's return), where and
when it ran (commit, date, CPU model and cores or the accelerator, jax and jaxlib), the
script's algorithm fingerprint, the algorithm's flags as args.json recorded them, and per seed:
its final score and its evaluation and training curves, each downsampled to at most MAX_POINTS
points (the last point always kept).

The page is a function of docs/results/, benchmark/suite.toml (which entries exist, which have
no data yet) and the scripts (which rows are stale): the same files give the same bytes. A row is
*stale* when its script's algorithm changed since the row's run (the fingerprint: the code above
the harness's banner, comments and docstrings aside), or when the suite's entry no longer runs
the command the row ran. The curve images are regenerated beside the page but not compared by
--check: PNG bytes depend on matplotlib's and FreeType's versions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import shutil
import tokenize
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.stats import iqm, mean_ci_band, normalise, performance_profile, stratified_bootstrap_ci
from benchmark.suite import ROOT, SUITE, Entry, entry_flags, entry_tag, load_suite, passes, select_entries

RESULTS_DIR = ROOT / "docs" / "results"
DOCS_PATH = ROOT / "docs" / "benchmarks.md"  # --docs writes its block
IMAGE_PREFIX = "results-"  # the page's images: docs/img/results-curves_{env}.png, results-profile.png
MAX_POINTS = 100
BANNER = "identical in every vibe_rl script"  # tests/sync_harness.py's: the harness starts at this line

# args.json keys that are not the algorithm's: the harness's RunFlags (the run and the machine) and
# what the harness adds. A compared run may differ in these; tests/test_results.py checks the list
# against RunFlags' fields.
RUN_KEYS = frozenset(
    {
        "exp_name", "seed", "num_seeds", "sweep", "track", "wandb_project_name", "wandb_entity",
        "capture_video", "save_model", "output_dir", "resume", "num_chunks", "checkpoint_frequency",
        "eval_episodes", "eval_frequency", "cpu_devices", "jax_cache_dir", "sweep_max_programs",
        "script", "run_seed", "run_name", "run_stamp", "sizes",
    }
)  # fmt: skip


# =====================================================================================
# What a run directory holds, read back
# =====================================================================================


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def learning_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """(global_step, charts/episodic_return) of a run, the finite points only."""
    points = [p for p in read_jsonl(run_dir / "metrics.jsonl") if "charts/episodic_return" in p]
    points = [p for p in points if p["charts/episodic_return"] is not None]
    points = [p for p in points if math.isfinite(p["charts/episodic_return"])]
    return [p["global_step"] for p in points], [p["charts/episodic_return"] for p in points]


def eval_curve(evaluation: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(global_step, mean return) of eval.json's evaluation curve (--eval-frequency's points, then
    the final evaluation); just the final evaluation where the run wrote no curve."""
    points = evaluation.get("eval_curve") or [evaluation]
    points = [p for p in points if "global_step" in p]
    return [p["global_step"] for p in points], [p["mean"] for p in points]


def training_score(run_dir: Path) -> float:
    """The mean training return (charts/episodic_return) of a run's last tenth of logged points."""
    returns = [p["charts/episodic_return"] for p in map(json.loads, (run_dir / "metrics.jsonl").open())
               if "charts/episodic_return" in p]  # fmt: skip
    return float(np.mean(returns[-max(1, len(returns) // 10) :]))


def read_evals(run_dirs: list[Path]) -> list[dict[str, Any]]:
    return [json.loads((d / "eval.json").read_text()) for d in run_dirs if (d / "eval.json").is_file()]


def median_sps(run_dir: Path) -> float | None:
    values = [p["charts/SPS"] for p in read_jsonl(run_dir / "metrics.jsonl") if "charts/SPS" in p]
    return float(np.median(values)) if values else None


def read_args(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "args.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def num_envs_of(run_dir: Path) -> int | None:
    return read_args(run_dir).get("num_envs")


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), float(np.std(values))


def entry_result(
    entry: Entry,
    status: str,
    note: str,
    run_dirs: list[Path],
    wall_s: float,
    compile_s: float | None,
    fingerprint: str | None,
) -> dict[str, Any]:
    """One entry's figures, from the run directories its process wrote and how that process ended
    (status "ok", or why not: "crash", "timeout", ...): each seed's score, their IQM [95% CI], the
    normalised scores, the throughput, the curves; status becomes "pass" or "fail" against the
    entry's threshold when the process ended well and every seed has its score."""
    scored = [d for d in run_dirs if (d / "eval.json").is_file()]  # a seed's directory, finished
    evals = read_evals(scored)
    seed_means = [e["mean"] for e in evals]
    if entry.score == "training":
        seed_means = [training_score(d) for d in scored]
    mean, std = mean_std(seed_means)
    score = iqm(seed_means) if seed_means else None
    if status == "ok" and len(seed_means) != entry.seeds:
        status, note = "crash", f"{len(seed_means)} run directories for {entry.seeds} seeds"
    if status == "ok":
        status = "pass" if passes(score, entry.threshold, entry.below) else "fail"
    normalised = None
    if seed_means and entry.random_score is not None and not entry.below:  # random at 0, threshold at 1
        normalised = [normalise(x, entry.random_score, entry.threshold) for x in seed_means]
    sps_logged = [s for s in map(median_sps, run_dirs) if s is not None]
    if status in ("pass", "fail") and sps_logged:
        sps = float(np.mean(sps_logged)) * entry.seeds
    elif status in ("pass", "fail"):
        sps = entry.total_timesteps * entry.seeds / max(wall_s - (compile_s or 0.0), 1e-9)
    else:
        sps = None
    return {
        **asdict(entry),
        "name": entry.name,
        "tag": entry.tag,
        "status": status,
        "note": note,
        "eval_mean": mean,
        "eval_std": std,
        "seed_eval_means": seed_means,  # each seed's final score
        "iqm": score,
        "iqm_ci95": list(stratified_bootstrap_ci([seed_means])) if seed_means else None,
        "normalised_scores": normalised,  # each seed's
        "normalised_iqm": iqm(normalised) if normalised else None,
        "eval_curves": [eval_curve(e) for e in evals],  # each seed's (steps, mean returns)
        "wall_s": wall_s,
        "compile_s": compile_s,
        "env_steps_per_s": sps,
        "num_envs": num_envs_of(run_dirs[0]) if run_dirs else None,
        "curves": [learning_curve(d) for d in run_dirs],
        "run_seeds": [read_args(d).get("run_seed", i) for i, d in enumerate(scored, 1)],
        "algorithm_args": read_args(scored[0]) if scored else {},  # record_of keeps the algorithm's
        "algorithm_fingerprint": fingerprint,
        "run_dirs": [str(d) for d in run_dirs],
    }


# =====================================================================================
# Aggregates, tables, plots
# =====================================================================================


def normalised_by_script(entries: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Per script, the normalised scores of each of its entries (envs) that ran and have a
    random score: one list of per-seed scores per entry."""
    tasks: dict[str, list[list[float]]] = {}
    for r in entries:
        if r["status"] in ("pass", "fail") and r.get("normalised_scores"):
            tasks.setdefault(Path(r["script"]).stem, []).append(r["normalised_scores"])
    return tasks


def aggregates(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per script: the IQM of the normalised scores of all its runs, every entry's seeds
    pooled, and its stratified bootstrap 95% CI (each entry's seeds resampled within it)."""
    return [
        {
            "script": script,
            "envs": len(scores),
            "runs": sum(map(len, scores)),
            "normalised_iqm": iqm(np.concatenate(scores)),
            "normalised_iqm_ci95": list(stratified_bootstrap_ci(scores)),
        }
        for script, scores in normalised_by_script(entries).items()
    ]


def threshold_text(r: dict[str, Any]) -> str:
    """An entry's threshold as the tables show it: "475", or "< 200" for an entry that must stay below."""
    return ("< " if r.get("below") else "") + f"{r['threshold']:g}"


def fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def ci_text(value: float | None, ci: list[float] | None) -> str:
    """'value [low, high]', two decimals."""
    return "–" if value is None or ci is None else f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def aggregate_table(rows: list[dict[str, Any]]) -> list[str]:
    """The per-script aggregate as markdown lines."""
    lines = [
        "| script | envs | runs | normalised IQM [95% CI] |",
        "|---|---|---|---|",
    ]
    for a in rows:
        lines.append(
            f"| {a['script']} | {a['envs']} | {a['runs']} "
            f"| {ci_text(a['normalised_iqm'], a['normalised_iqm_ci95'])} |"
        )
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown tables: suite, seed scaling, peers."""
    m = report["machine"]
    lines = [
        f"`{m['command']}` — {m['date']}, {m['device_kind']} ({m['backend']}, {m['cpu_count']} CPU cores), "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}",
        "",
        "| script | env | seeds | steps | eval return | IQM [95% CI] | normalised IQM | threshold | result "
        "| wall s | compile s | env steps/s | ceiling steps/s | % of ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    stopped = report.get("stopped")
    if stopped:  # above the table: it lists only the entries that finished
        rest = (
            f"the rest ({len(stopped['rest'])}): `{stopped['command']}`"
            if stopped["rest"]
            else "no entry left"
        )
        lines[1:1] = ["", f"Stopped by {stopped['signal']}; the table has the entries that finished; {rest}"]
    for r in report["entries"]:
        ret = "–" if r["eval_mean"] is None else f"{r['eval_mean']:.1f} ± {r['eval_std']:.1f}"
        result = r["status"].upper() if r["status"] in ("fail", "crash", "timeout", "missing") else "pass"
        if r["note"]:
            result += f" ({r['note'][:80]})".replace("|", "/")
        ceil = r.get("ceiling_sps")
        frac = f"{100 * r['env_steps_per_s'] / ceil:.2g}" if ceil and r["env_steps_per_s"] else "–"
        lines.append(
            f"| {r['name']} | {r['env']} | {r['seeds']} | {r['total_timesteps']:,} | {ret} "
            f"| {ci_text(r.get('iqm'), r.get('iqm_ci95'))} | {fmt(r.get('normalised_iqm'), 2)} "
            f"| {threshold_text(r)} "
            f"| {result} | {fmt(r['wall_s'])} | {fmt(r['compile_s'])} | {fmt(r['env_steps_per_s'], 0)} "
            f"| {fmt(ceil, 0)} | {frac} |"
        )
    if report.get("aggregates"):
        lines += [
            "",
            "Per script: the IQM of the normalised scores (random 0, threshold 1), all envs' seeds pooled:",
        ]
        lines += ["", *aggregate_table(report["aggregates"])]
    if report.get("seed_scaling"):
        lines += ["", "Seed scaling (PPO CartPole-v1, seeds vmapped in one program; training time only):", ""]
        lines += ["| seeds | train s | compile s | time / 1 seed |", "|---|---|---|---|"]
        for r in report["seed_scaling"]:
            lines.append(
                f"| {r['seeds']} | {fmt(r['train_s'], 2)} | {fmt(r['compile_s'])} | {fmt(r['ratio'], 2)} |"
            )
    if report.get("peers"):
        lines += [
            "",
            "Peers (same env, budget and PPO hyperparameters, 1 seed, each in its own process):",
            "",
        ]
        lines += [
            "| system | result | wall s | compile s | train s | eval return | wall / ours | train / ours "
            "| return / ours |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["peers"]:
            result = f"{r['status']} {r.get('note', '')}".strip()
            lines.append(
                f"| {r['system']} | {result} | {fmt(r.get('wall_s'))} | {fmt(r.get('compile_s'))} "
                f"| {fmt(r.get('train_s'), 2)} | {fmt(r.get('eval_mean'))} | {fmt(r.get('wall_ratio'), 2)} "
                f"| {fmt(r.get('train_ratio'), 2)} | {fmt(r.get('return_ratio'), 2)} |"
            )
    return "\n".join(lines) + "\n"


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(entries: list[dict[str, Any]], out: Path) -> list[Path]:
    """One PNG per env, every script on it: the mean and 95% bootstrap band over seeds of the
    training return (solid) and of the deterministic evaluation return (dashed) vs env steps. The
    legend, beside the axes, names each script once (its colour) and the two line styles once."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    paths = []
    for env in dict.fromkeys(r["env"] for r in entries):
        rows = [r for r in entries if r["env"] == env]
        palette = plt.get_cmap("tab10" if len(rows) <= 10 else "tab20").colors  # a colour per script
        fig, ax = plt.subplots(figsize=(7, 4.5))
        handles = []
        for r, color in zip(rows, palette * len(rows), strict=False):
            seeds = 0
            for curves, style in ((r["curves"], "-"), (r.get("eval_curves", []), "--")):
                grid, mean, low, high = mean_ci_band([c for c in curves if len(c[0]) > 1])
                if len(grid) < 2:
                    continue
                seeds = max(seeds, sum(len(c[0]) > 1 for c in curves))
                ax.plot(grid, mean, style, color=color)
                ax.fill_between(grid, low, high, color=color, alpha=0.15)
            if seeds:
                label = f"{r['name']} ({seeds} seed{'s' if seeds > 1 else ''})"
                handles.append(Line2D([], [], color=color, label=label))
        if handles:
            handles += [
                Line2D([], [], color="k", ls=ls, label=kind) for ls, kind in (("-", "train"), ("--", "eval"))
            ]
            ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set(
            title=f"{env}: mean and 95% bootstrap CI over seeds", xlabel="env steps", ylabel="episodic return"
        )
        ax.grid(alpha=0.3)
        path = out / f"curves_{env.replace('/', '-')}.png"
        # the legend lies outside the axes: the saved box grows to hold it
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})  # no version stamp
        plt.close(fig)
        paths.append(path)
    return paths


def plot_profile(entries: list[dict[str, Any]], out: Path) -> Path | None:
    """profile.png: per script, the fraction of its runs (every env's seeds) whose normalised
    score exceeds tau; None when no entry has normalised scores."""
    runs = {script: np.concatenate(scores) for script, scores in normalised_by_script(entries).items()}
    if not runs:
        return None
    every = np.concatenate(list(runs.values()))
    taus = np.linspace(min(0.0, every.min()) - 0.05, max(1.0, every.max()) + 0.05, 400)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for script, scores in runs.items():
        ax.plot(taus, performance_profile(scores, taus), label=f"{script} ({len(scores)} runs)")
    ax.axvline(1.0, color="gray", linestyle=":", label="threshold")
    ax.set(
        title="Performance profiles",
        xlabel="normalised score τ (random policy 0, threshold 1)",
        ylabel="fraction of runs with score > τ",
        ylim=(-0.02, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = out / "profile.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def update_docs(report: dict[str, Any], table: str, plots: list[Path], docs: Path = DOCS_PATH) -> None:
    """Replace (or append) this preset's and backend's block in docs/benchmarks.md."""
    key = f"{report['preset']}-{report['machine']['backend']}"
    image_dir = docs.parent / "benchmarks"
    image_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for path in plots:
        target = image_dir / f"{key}-{path.name}"
        shutil.copy(path, target)
        images.append(f"![{path.stem}](benchmarks/{target.name})")
    table = re.sub(r"(?<= )/[^\s`]+", lambda found: Path(found.group(0)).name, table)  # no machine path
    start, end = f"<!-- results:{key} -->", f"<!-- /results:{key} -->"
    block = f"{start}\n{table}\n{' '.join(images)}\n{end}"
    text = docs.read_text() if docs.is_file() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + f"\n\n### {key}\n\n{block}\n"
    docs.write_text(text)


def write_report(report: dict[str, Any], out: Path) -> tuple[str, list[Path]]:
    """The runner's report in out: the per-script aggregates (added to report), the curves and
    profiles, results.json and results.md. Returns results.md's text and the curves' paths."""
    report["aggregates"] = aggregates(report["entries"])
    plots = plot_curves(report["entries"], out)
    plot_profile(report["entries"], out)
    table = markdown(report)
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "results.md").write_text(table)
    return table, plots


# =====================================================================================
# One entry's data
# =====================================================================================


def entry_command(entry: Entry) -> str:
    """The command a suite entry runs (the runner adds only --output-dir)."""
    return " ".join(["python", entry.script, *entry_flags(entry)])


def algorithm_fingerprint(script: Path) -> str:
    """A hash of the script's algorithm: its code above the harness's banner, less its comments, its
    docstrings and all whitespace. They are found by position (tokenize's comments, ast's
    docstrings), so that every Python version gives the same hash for the same code."""
    lines = script.read_text().splitlines(keepends=True)
    banner = next((i for i, line in enumerate(lines) if BANNER in line), len(lines))  # none: the whole file
    lines = lines[:banner]
    kept = [list(line) for line in lines]  # [row][column]: a character, or "" once dropped
    for (row, column), (end_row, end_column) in [*comment_spans(lines), *docstring_spans(lines)]:
        for r in range(row, end_row + 1):
            start, stop = (column if r == row else 0), (end_column if r == end_row else len(kept[r - 1]))
            kept[r - 1][start:stop] = [""] * (stop - start)
    code = "".join("".join(line) for line in kept)
    return hashlib.sha256("".join(code.split()).encode()).hexdigest()[:16]


# (row, column) to (row, column): rows from 1, columns in characters
Span = tuple[tuple[int, int], tuple[int, int]]


def comment_spans(lines: list[str]) -> list[Span]:
    tokens = tokenize.generate_tokens(iter(lines).__next__)
    return [(token.start, token.end) for token in tokens if token.type == tokenize.COMMENT]


def docstring_spans(lines: list[str]) -> list[Span]:
    """Each module's, class's and function's docstring (ast counts columns in bytes: made characters)."""
    spans = []
    for node in ast.walk(ast.parse("".join(lines))):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
            continue
        if isinstance(first.value.value, str):
            start = (first.lineno, len(lines[first.lineno - 1].encode()[: first.col_offset].decode()))
            end_line = lines[first.end_lineno - 1]
            spans.append((start, (first.end_lineno, len(end_line.encode()[: first.end_col_offset].decode()))))
    return spans


def downsample(steps: list[int], values: list[float], points: int = MAX_POINTS) -> list[list[float]]:
    """[[steps], [values]] at most `points` long: evenly spaced indices, first and last kept,
    values to 6 significant digits."""
    if not steps:
        return [[], []]
    keep = np.unique(np.linspace(0, len(steps) - 1, min(points, len(steps))).round().astype(int))
    return [[int(steps[i]) for i in keep], [float(f"{values[i]:.6g}") for i in keep]]


def record_of(result: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """The data file of one entry's run: `result` is an `entry_result` dict (or a
    saved results.json's entry), `machine` its report's machine."""
    scores = result["seed_eval_means"]
    seeds = result.get("run_seeds") or list(range(1, len(scores) + 1))
    eval_curves = result.get("eval_curves") or [[[], []]] * len(scores)
    train_curves = result.get("curves") or [[[], []]] * len(scores)
    entry = Entry(**{k: result[k] for k in Entry.__dataclass_fields__ if k in result})
    return {
        "script": result["script"],
        "env": result["env"],
        "variant": result.get("variant", ""),
        "command": entry_command(entry),
        "total_timesteps": result["total_timesteps"],
        "flags": result.get("flags", {}),
        "eval_points": result.get("eval_points"),
        "threshold": result["threshold"],
        "threshold_source": result.get("threshold_source", ""),
        "below": result.get("below", False),
        "random_score": result.get("random_score"),
        "score": result.get("score", "eval"),
        "commit": machine.get("commit"),
        "date": machine.get("date"),
        "machine": {
            "backend": machine.get("backend"),
            "device": machine.get("device_kind"),
            "device_count": machine.get("device_count"),
            "cpu": machine.get("cpu_model") or machine.get("processor"),
            "cores": machine.get("cpu_count"),
        },
        "jax": machine.get("jax"),
        "jaxlib": machine.get("jaxlib"),
        "algorithm_fingerprint": result.get("algorithm_fingerprint"),
        "args": {
            key: value for key, value in result.get("algorithm_args", {}).items() if key not in RUN_KEYS
        },
        "status": result["status"],
        "wall_s": round(result["wall_s"], 1) if result.get("wall_s") is not None else None,
        "env_steps_per_s": round(result["env_steps_per_s"]) if result.get("env_steps_per_s") else None,
        "runs": [
            {
                "seed": seed,
                "score": float(f"{score:.6g}"),
                "eval_curve": downsample(*eval_curve),
                "train_curve": downsample(*train_curve),
            }
            for seed, score, eval_curve, train_curve in zip(
                seeds, scores, eval_curves, train_curves, strict=True
            )
        ],
    }


def dumps(record: dict[str, Any]) -> str:
    """A record as its file holds it: one key a line, and each seed's run (its curves) on one line."""
    head = json.dumps({**record, "runs": []}, indent=1)
    runs = ",\n".join("  " + json.dumps(run) for run in record["runs"])
    return head.replace('"runs": []', '"runs": [\n' + runs + "\n ]") + "\n"


def write_records(report: dict[str, Any], folder: Path = RESULTS_DIR) -> list[Path]:
    """Each entry of a full-preset report that ran to its end, as its data file (replacing the
    entry's earlier one)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for result in report["entries"]:
        if result["status"] not in ("pass", "fail"):
            print(f"  not recorded: {result['name']} {result['env']} ({result['status']})")
            continue
        path = folder / f"{tag_of(result)}.json"
        path.write_text(dumps(record_of(result, report["machine"])))
        written.append(path)
        print(f"  recorded {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return written


def tag_of(record: dict[str, Any]) -> str:
    return entry_tag(record["script"], record["env"], record.get("variant", ""))


def load_records(folder: Path = RESULTS_DIR) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


# =====================================================================================
# The page
# =====================================================================================

PAGE_INTRO = """\
# Results

Generated by `python -m benchmark --results-doc` from the data in [results/](results/) (one JSON
file per suite entry: its command, commit, date, machine, jax version, and every seed's score and
curves; docs/benchmarks.md, "Results as data"). Do not edit it by hand: `python -m benchmark
--full --record` re-runs entries and regenerates it, and a test fails when the page and the data
disagree. Each entry's command, to train it as the suite does: [commands.md](commands.md).
Compare a run of yours with a row: `python -m benchmark.compare RUN_DIR`.

Citing: cite vibe_rl with [CITATION.cff](../CITATION.cff), and a row with its data file in
[results/](results/) (`results/{script}__{env}[__{variant}].json`, the env's "/" written "-")
and the commit that file records (`"commit"`; the row's "measured" cell shows its first 10
characters).

## What the numbers are

- **Score** of a run (one seed): its final deterministic (greedy) evaluation, eval.json's
  `"mean"`: the mean return of `--eval-episodes` episodes (32 unless the entry says otherwise),
  each played to its end, after `steps` env steps of training. An entry with `score =
  "training"` (Craftax's) scores its mean training return over its last tenth of logged points.
- **IQM [95% CI]**: the interquartile mean of the seeds' scores (sort, drop a quarter at each
  end; with 3 seeds or fewer it is the mean) and its 95% percentile bootstrap interval (2000
  resamples of the seeds, benchmark/stats.py). With few seeds the percentile bootstrap
  under-covers: read the interval as a lower bound on the uncertainty. All seeds of an entry
  train together in one vmapped program (`--num-seeds`), seeds 1, 2, 3, ....
- **Threshold**: the entry's pass mark in benchmark/suite.toml, with its source (a published
  reference, or a stated margin below one); the entry passes when its IQM reaches it. It is
  also the reference of the normalised score. A threshold written "< x" belongs to a contrast
  (`below = true`): a script that must fail where another succeeds; it passes when its IQM
  stays below x, and has no normalised score.
- **Random**: the return of uniform random actions, suite.toml's `[random]` table.
- **Normalised score**: (score - random) / (threshold - random): a random policy scores 0 and
  the threshold 1. **Per script**: the IQM of the normalised scores of all its runs, every env's
  seeds pooled, with a stratified bootstrap 95% CI (Agarwal et al. 2021, "Deep Reinforcement
  Learning at the Edge of the Statistical Precipice").
- **Wall s**: the whole process (start-up, compilation, training, evaluations), all seeds.
  **Env steps/s**: training throughput summed over the seeds (seeds x the median of the run's
  logged `charts/SPS`). Both belong to the row's machine.
- **Measured**: the row's date, the commit it ran at and its machine (the table below). A row
  marked **stale** no longer describes the code: its script's algorithm (the code above the
  harness's banner, comments and docstrings aside) changed since, or the suite's entry now runs
  another command. Re-run it with the entry's command in commands.md and `--record`.
- **Curves**: per env, the mean over seeds and its 95% bootstrap band of the training return
  (`charts/episodic_return`, solid) and of the deterministic evaluation (dashed), each seed's
  curve interpolated onto a common grid of steps.
"""


def machine_text(record: dict[str, Any]) -> str:
    m = record["machine"]
    where = f"{m.get('cpu') or '?'}, {m.get('cores') or '?'} cores"
    if m.get("backend") not in (None, "cpu"):
        where = f"{m.get('device_count') or 1} x {m.get('device')} ({m.get('backend')}); host {where}"
    return f"{where}; jax {record.get('jax')}, jaxlib {record.get('jaxlib')}"


def as_result(record: dict[str, Any]) -> dict[str, Any]:
    """A record as an `entry_result` dict, for the tables, aggregates and plots."""
    scores = [run["score"] for run in record["runs"]]
    random, threshold = record.get("random_score"), record["threshold"]
    normalised = None
    if random is not None and not record.get("below"):
        normalised = [float(normalise(x, random, threshold)) for x in scores]
    score = iqm(scores)
    status = "pass" if passes(score, threshold, record.get("below", False)) else "fail"
    name = Path(record["script"]).stem + (f" ({record['variant']})" if record.get("variant") else "")
    return {
        **record,
        "name": name,
        "seeds": len(scores),
        "status": status,
        "seed_eval_means": scores,
        "iqm": score,
        "iqm_ci95": list(stratified_bootstrap_ci([scores])),
        "normalised_scores": normalised,
        "normalised_iqm": iqm(normalised) if normalised else None,
        "curves": [run["train_curve"] for run in record["runs"]],
        "eval_curves": [run["eval_curve"] for run in record["runs"]],
    }


def same_training(command: str) -> str:
    """A command less what does not change how a seed trains: how many seeds, how often it is evaluated."""
    return re.sub(r" --(num-seeds|eval-frequency) \S+", "", command)


def staleness(record: dict[str, Any], suite_entries: dict[str, Entry], root: Path = ROOT) -> str:
    """Why a row no longer describes the code ("" when it does)."""
    entry = suite_entries.get(tag_of(record))
    script = root / record["script"]
    if entry is None:
        return "not in the suite any more"
    if not script.is_file() or algorithm_fingerprint(script) != record.get("algorithm_fingerprint"):
        return "the algorithm changed since"
    if (
        same_training(entry_command(entry)) != same_training(record["command"])
        or entry.threshold != record["threshold"]
    ):
        return "the suite entry changed since"
    return ""


def results_page(
    records: list[dict[str, Any]], suite: dict[str, Any], images: dict[str, str], root: Path = ROOT
) -> str:
    """docs/results.md's text: a function of the records, the suite and the scripts."""
    full = {entry_tag(e.script, e.env, e.variant): e for e in select_entries(suite, quick=False)}
    order = list(full)
    tags = {tag_of(r) for r in records}
    records = sorted(records, key=lambda r: order.index(tag_of(r)) if tag_of(r) in full else len(order))
    machines = list(dict.fromkeys(machine_text(r) for r in records))
    lines = [PAGE_INTRO, "## Where and when", ""]
    lines += ["| machine | what | rows |", "|---|---|---|"]
    for i, text in enumerate(machines, 1):
        lines.append(f"| M{i} | {text} | {sum(machine_text(r) == text for r in records)} |")
    reasons = [staleness(r, full, root) for r in records]
    current = reasons.count("")
    lines += ["", f"{len(records)} rows for {len(full)} full-preset entries: {current} current, "]
    lines[-1] += f"{len(records) - current} stale. The data: {data_size(records)} of JSON in results/.\n"
    rows = [
        (as_result(r), reason, machines.index(machine_text(r)) + 1)
        for r, reason in zip(records, reasons, strict=True)
    ]
    for script in dict.fromkeys(Path(r["script"]).stem for r in records):
        lines += [
            f"## {script}",
            "",
            "| env | steps | seeds | IQM [95% CI] | seeds' scores | random | threshold | source "
            "| normalised IQM | result | wall s | env steps/s | measured |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        mine = [row for row in rows if Path(row[0]["script"]).stem == script]
        for r, reason, machine in mine:
            measured = f"{(r['date'] or '?')[:10]}, {(r['commit'] or '?')[:10]}, M{machine}"
            cells = [
                r["env"] + (f" ({r['variant']})" if r.get("variant") else ""),
                f"{r['total_timesteps']:,}",
                r["seeds"],
                ci_text(r["iqm"], r["iqm_ci95"]),
                ", ".join(f"{x:.2f}" for x in r["seed_eval_means"]),
                fmt(r.get("random_score"), 2),
                threshold_text(r),
                r.get("threshold_source") or "–",
                fmt(r["normalised_iqm"], 2),
                r["status"],
                fmt(r.get("wall_s")),
                fmt(r.get("env_steps_per_s"), 0),
                measured + (f"; **stale**: {reason}" if reason else ""),
            ]
            lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
        links = [
            f"[{env}]({images[env]})" for env in dict.fromkeys(r["env"] for r, _, _ in mine) if env in images
        ]
        lines += ["", f"Curves: {', '.join(links)}." if links else "", ""]
    missing = [entry for tag, entry in full.items() if tag not in tags]
    lines += ["## Not yet measured", ""]
    if missing:
        lines += [
            f"Full-preset entries with no data in results/ ({len(missing)}; commands.md has their commands):"
        ]
        lines += [""]
        lines += [f"- {e.name} on {e.env}, {e.total_timesteps:,} steps" for e in missing]
    else:
        lines += ["Every full-preset entry has a row."]
    lines += ["", "## Per script, over its envs", ""]
    per_script = aggregates([r for r, _, _ in rows])
    if per_script:
        lines += ["Normalised scores (random 0, threshold 1), all envs' seeds pooled:", ""]
        lines += aggregate_table(per_script)
    if "profile" in images:
        lines += ["", f"![performance profiles]({images['profile']})"]
    lines += ["", "## Curves", ""]
    lines += [f"![{env}]({link})\n" for env, link in images.items() if env != "profile"]
    return "\n".join(lines).rstrip("\n") + "\n"


def data_size(records: list[dict[str, Any]]) -> str:
    """The data's size as its files hold it (`dumps`), in kB."""
    size = sum(len(dumps(record).encode()) for record in records)
    return f"{size / 1000:,.0f} kB"


def page_images(records: list[dict[str, Any]]) -> dict[str, str]:
    """{env or "profile": the image's path relative to the page}: the names the page links."""
    envs = dict.fromkeys(r["env"] for r in records)
    images = {env: f"img/{IMAGE_PREFIX}curves_{env.replace('/', '-')}.png" for env in envs}
    if any(r.get("random_score") is not None and not r.get("below") for r in records):
        images["profile"] = f"img/{IMAGE_PREFIX}profile.png"
    return images


def write_results_doc(
    folder: Path = RESULTS_DIR, check: bool = False, suite: Path = SUITE, root: Path = ROOT
) -> int:
    """Write the page beside the data folder (docs/results/ -> docs/results.md, its images in
    docs/img/) from the data; with check, write nothing and return 1 when the page on disk is not
    the page the data gives."""
    docs = folder.parent / f"{folder.name}.md"
    records = load_records(folder)
    images = page_images(records)
    text = results_page(records, load_suite(suite), images, root)
    if check:
        if docs.is_file() and docs.read_text() == text:
            print(f"{docs.name} matches {folder.name}/ ({len(records)} rows)")
            return 0
        print(f"{docs} is not what {folder}/ gives: run python -m benchmark --results-doc")
        return 1
    image_dir = docs.parent / "img"
    image_dir.mkdir(parents=True, exist_ok=True)
    results = [as_result(r) for r in records]
    made = plot_curves(results, image_dir)  # curves_{env}.png, renamed below
    profile = plot_profile(results, image_dir)
    for path in [*made, *([profile] if profile else [])]:
        path.replace(image_dir / f"{IMAGE_PREFIX}{path.name}")
    wanted = {docs.parent / link for link in images.values()}
    for old in image_dir.glob(f"{IMAGE_PREFIX}*.png"):  # an env no row has any more
        if old not in wanted:
            old.unlink()
    docs.write_text(text)
    print(f"wrote {docs} ({len(records)} rows) and {len(wanted)} images")
    return 0
