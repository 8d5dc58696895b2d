"""Training curves of run directories as one CSV, in the long format openrlbenchmark-style tools read.

    python -m benchmark.export runs/CartPole-v1__ppo_jax_scan__1__1700000000 ... --out runs.csv
    python -m benchmark.export benchmark/out/full-20261125-100000/runs --out runs.csv

A run directory is one with args.json; a directory without one stands for every run directory
under it. Columns: global_step,episodic_return,seed,env_id,exp_name: one row per finite
charts/episodic_return point of the run's metrics.jsonl (the training return), seed being
args.json's run_seed, env_id and exp_name its env_id and exp_name.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path

COLUMNS = ("global_step", "episodic_return", "seed", "env_id", "exp_name")


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """The run directories among paths, and under those that are not one themselves."""
    found = []
    for path in paths:
        if (path / "args.json").is_file():
            found.append(path)
        else:
            found += sorted(p.parent for p in path.rglob("args.json"))
    return list(dict.fromkeys(found))


def rows(run_dir: Path) -> Iterator[tuple[int, float, int, str, str]]:
    """(global_step, episodic_return, seed, env_id, exp_name) of each finite training return."""
    args = json.loads((run_dir / "args.json").read_text())
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    for point in map(json.loads, filter(str.strip, lines)):
        value = point.get("charts/episodic_return")
        if value is not None and math.isfinite(value):
            yield point["global_step"], value, args["run_seed"], args["env_id"], args["exp_name"]


def export(paths: list[Path], out: Path) -> int:
    """Write the CSV of every run directory found in paths; the number of rows written."""
    count = 0
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for run_dir in find_run_dirs(paths):
            for row in rows(run_dir):
                writer.writerow(row)
                count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories, or directories holding them")
    parser.add_argument("--out", type=Path, default=Path("runs.csv"), help="the CSV file (default runs.csv)")
    args = parser.parse_args(argv)
    runs = find_run_dirs(args.run_dirs)
    if not runs:
        parser.error(
            f"no run directory (one with args.json) in or under {', '.join(map(str, args.run_dirs))}"
        )
    count = export(args.run_dirs, args.out)
    print(f"{args.out}: {count} rows from {len(runs)} run directories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
