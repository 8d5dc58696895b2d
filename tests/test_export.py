"""benchmark/export.py: a tiny real run (ppo_jax_scan, 2 seeds, ~10 s) exported as CSV."""

from __future__ import annotations

import csv
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import ROOT

sys.path.insert(0, str(ROOT))  # the harness is a package of the repository, not installed
export = importlib.import_module("benchmark.export")

TINY_RUN = "--env-id CartPole-v1 --num-envs 4 --num-steps 16 --total-timesteps 1920 --num-chunks 3"
TINY_RUN += " --eval-episodes 4 --num-seeds 2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of one 2-seed run: two run directories."""
    out = tmp_path_factory.mktemp("runs")
    command = [sys.executable, "vibe_rl/ppo_jax_scan.py", *TINY_RUN.split(), "--jax-cache-dir", ""]
    command += ["--output-dir", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_export_writes_one_row_per_finite_training_return(runs, tmp_path):
    run_dirs = sorted(runs.iterdir())
    out = tmp_path / "runs.csv"
    assert export.main([*map(str, run_dirs), "--out", str(out)]) == 0
    header, rows = read_csv(out)
    assert header == ["global_step", "episodic_return", "seed", "env_id", "exp_name"]
    assert {r["seed"] for r in rows} == {"1", "2"}
    assert {(r["env_id"], r["exp_name"]) for r in rows} == {("CartPole-v1", "ppo_jax_scan")}
    for run_dir in run_dirs:
        seed = json.loads((run_dir / "args.json").read_text())["run_seed"]
        points = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        expected = [
            (p["global_step"], p["charts/episodic_return"])
            for p in points
            if math.isfinite(p.get("charts/episodic_return", math.nan))
        ]
        got = [(int(r["global_step"]), float(r["episodic_return"])) for r in rows if r["seed"] == str(seed)]
        assert got == expected and len(got) > 10  # every point, in order, the values exact
        assert all(step % 64 == 0 and step <= 1920 for step, _ in got)  # 4 envs x 16 steps per point


def test_a_parent_directory_stands_for_the_run_directories_under_it(runs, tmp_path):
    explicit, parent = tmp_path / "explicit.csv", tmp_path / "parent.csv"
    export.main([*map(str, sorted(runs.iterdir())), "--out", str(explicit)])
    export.main([str(runs), "--out", str(parent)])  # the directory that holds the two run directories
    assert parent.read_text() == explicit.read_text()
    with pytest.raises(SystemExit):  # no run directory at all: an error, not an empty CSV
        export.main([str(tmp_path / "nothing_here"), "--out", str(tmp_path / "empty.csv")])
