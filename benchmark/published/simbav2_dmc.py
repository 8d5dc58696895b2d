"""The published DM Control returns that simbav2_jax and sac_jax compare with, from SimbaV2's repository.

SimbaV2's repository (github.com/dojeon-ai/SimbaV2) publishes its curves as CSVs (columns: exp_name, env_name,
seed, metric, env_step, value; env_step counts simulator control steps, DM Control's action repeat of 2
included). This keeps, per seed, the evaluation return (metric avg_return) at 100k and 200k env steps on the
five tasks of issue 82, for each algorithm whose CSV has them, with each value's source file and the commit:

    python -m benchmark.published.simbav2_dmc /path/to/SimbaV2          # a checkout, or its .git directory
    python -m benchmark.published.simbav2_dmc /path/to/SimbaV2 --check  # exit 1 if simbav2_dmc.json differs

writes benchmark/published/simbav2_dmc.json (the files are read at the checkout's HEAD, with git).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

OUTPUT = Path(__file__).with_name("simbav2_dmc.json")
TASKS = ("cheetah-run", "walker-walk", "reacher-easy", "cartpole-balance", "finger-spin")
ENV_STEPS = (100_000, 200_000)
# algorithm -> the CSV that holds its runs (SimbaV2 at 2 and 1 updates per agent step; the baselines of its
# paper's comparison that have DM Control runs)
SOURCES = {
    "simbav2_utd2": "results/baseline/simbaV2_utd2.csv",
    "simbav2_utd1": "results/scaling/utd/simbaV2_utd1.csv",
    "sac": "results/baseline/sac.csv",
    "simba_utd2": "results/baseline/simba_utd2.csv",
    "bro_utd2": "results/baseline/bro_utd2.csv",
    "tdmpc2": "results/baseline/tdmpc2.csv",
    "mrq": "results/baseline/mrq.csv",
}


def canonical(name: str) -> str:  # the CSVs spell tasks cheetah-run, cheetah_run, ...
    return name.lower().replace("_", "-")


def git(repository: Path, *arguments: str) -> str:
    command = ["git", "-C", str(repository), *arguments]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def extract(repository: Path) -> dict:
    """{commit, source, tasks, env_steps, returns: {algorithm: {task: {env_step: {seed: return}}}}}."""
    commit = git(repository, "rev-parse", "HEAD").strip()
    returns: dict = {}
    for algorithm, path in SOURCES.items():
        rows = csv.DictReader(io.StringIO(git(repository, "show", f"HEAD:{path}")))
        found: dict = {}
        for row in rows:
            task, step = canonical(row["env_name"]), int(float(row["env_step"]))
            if row["metric"] == "avg_return" and task in TASKS and step in ENV_STEPS:
                by_seed = found.setdefault(task, {}).setdefault(str(step), {})
                by_seed[str(int(float(row["seed"])))] = round(float(row["value"]), 4)
        returns[algorithm] = {"source": path, "tasks": {t: found[t] for t in TASKS if t in found}}
    return {
        "about": "per-seed evaluation returns (avg_return) from SimbaV2's published CSVs; env steps are "
        "simulator control steps (DM Control's action repeat 2 included). Written by "
        "python -m benchmark.published.simbav2_dmc SIMBAV2_CHECKOUT",
        "repository": "https://github.com/dojeon-ai/SimbaV2",
        "commit": commit,
        "tasks": list(TASKS),
        "env_steps": list(ENV_STEPS),
        "algorithms": returns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="a checkout of SimbaV2 (or its git directory)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file differs")
    options = parser.parse_args()
    text = json.dumps(extract(options.repository), indent=1, sort_keys=False) + "\n"
    if options.check:
        sys.exit(0 if OUTPUT.exists() and OUTPUT.read_text() == text else 1)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
