"""Results as data: each full suite entry's run kept in docs/results/, and docs/results.md made from it.

    python -m benchmark --full --record          run entries, keep each one's data, regenerate the page
    python -m benchmark --results-doc            docs/results.md (and its curve images) from docs/results/
    python -m benchmark --results-doc --check    exit 1 if docs/results.md is not what the data gives

One JSON file per (script, env, variant): docs/results/{script}__{env}[__{variant}].json, the env's
"/" written "-". A file holds the entry as it ran (its exact command, budget, threshold and its
source, the random policy's return), where and when it ran (commit, date, CPU model and cores or
the accelerator, jax and jaxlib), the script's algorithm fingerprint, the algorithm's flags as
args.json recorded them, and per seed: its final score and its evaluation and training curves,
each downsampled to at most MAX_POINTS points (the last point always kept).

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
import re
import tokenize
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.run import (
    ROOT,
    SUITE,
    Entry,
    aggregate_table,
    aggregates,
    ci_text,
    entry_flags,
    entry_tag,
    fmt,
    load_suite,
    passes,
    plot_curves,
    plot_profile,
    select_entries,
    threshold_text,
)
from benchmark.stats import iqm, normalise, stratified_bootstrap_ci

RESULTS_DIR = ROOT / "docs" / "results"
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
# One entry's data
# =====================================================================================


def entry_command(entry: Entry) -> str:
    """The command a suite entry runs (benchmark/run.py's `launch` adds only --output-dir)."""
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
    """The data file of one entry's run: `result` is benchmark/run.py's `run_entry` dict (or a
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
    """A record as benchmark/run.py's entry dicts, for its tables, aggregates and plots."""
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
