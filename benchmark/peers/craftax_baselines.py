"""Craftax_Baselines (github.com/MichaelTMatthews/Craftax_Baselines, the PureJaxRL fork behind the
Craftax paper's baselines) as a peer for vibe_rl's Craftax runs, at the Craftax-1M protocol.

    export VIBE_RL_PEERS_PYTHON=/work/peers-venv/bin/python   # jax, flax, optax, distrax, craftax
    export VIBE_RL_CRAFTAX_BASELINES_DIR=/work/craftax_baselines
    python benchmark/peers/craftax_baselines.py --env-name Craftax-Symbolic-v1 \
        --total-timesteps 1000000 --seeds 0,1,2                # ppo.py; --rnn for ppo_rnn.py
    python benchmark/peers/craftax_baselines.py --env-name Craftax-Classic-Symbolic-v1 \
        --total-timesteps 20000 --num-envs 64 --seeds 0        # a check: 86 s on an idle 2-core CPU

What it runs: the checkout's own ppo.py (or ppo_rnn.py), unmodified, through its own `__main__`
(argparse, run_ppo, its jit(vmap(train))), one subprocess per seed, in the interpreter named by
$VIBE_RL_PEERS_PYTHON (default: this one). Flags it passes: --env_name, --total_timesteps,
--num_envs, --seed, --num_repeats, and whatever follows `--` on this command line, verbatim (e.g.
`-- --lr 3e-4 --num_steps 128`). Every other hyperparameter is the file's own argparse default.

How the score is read without Weights & Biases: the file's own logging path is kept on (its
defaults --use_wandb --debug): each update, a jax.debug.callback inside the compiled scan calls
logz/batch_logging.py's create_log_dict and batch_log, which end in `wandb.log`. A small driver
(DRIVER below, run with `python -c`) puts a stand-in `wandb` module in sys.modules before running
the file with runpy: its init() keeps the config dict that run_ppo hands it (make_train later adds
NUM_UPDATES and MINIBATCH_SIZE to that same dict) and its log() does nothing. After the run the
driver reads logz.batch_logging.batch_logs, the file's own per-update record (update step -> one
dict per repeat: episode_return, episode_length, Achievements/<name> success rates in percent,
achievements = their sum / 100), and writes it as JSON. The real wandb is neither imported nor
needed, and nothing is sent anywhere: the run needs only the checkout and the installed packages.

The final score of a seed: the last update in which at least one episode ended (the file's metric
is the mean over the episodes that ended during that update's num_envs x num_steps steps; updates
with none are NaN, and batch_log drops them), as a percentage of the env's maximum return:
226 for Craftax (the sum of craftax.craftax.constants.ACHIEVEMENT_REWARD_MAP: 1/3/5/8 per basic,
intermediate, advanced, very advanced achievement) and 22 for Craftax-Classic (one per
achievement). The return also holds the health reward, 0.1 x the change in health, which sums
to at most 0 over an episode (health starts at its maximum), so the achievement sum is the
maximum. This is the Craftax scoreboard's "Reward (% max)". For Craftax-Classic the Crafter score
(geometric mean of the per-achievement success rates, offset 1%) of that update is added.

Timing: wall_s is the whole subprocess per seed (interpreter start, imports, compilation, training,
as a user waits for `python ppo.py`), summed over seeds; experiment_s is the file's own printed
"Time to run experiment" (its jitted train's first call: compilation + training).

Prints the child's output to stderr, then one JSON line on stdout; --save-json PATH also writes
the full record (the config the file ran, the per-update curves of every seed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DIR_VARIABLE = "VIBE_RL_CRAFTAX_BASELINES_DIR"
DEFAULT_DIR = "/work/craftax_baselines"
PYTHON_VARIABLE = "VIBE_RL_PEERS_PYTHON"
# The commit the runner was checked against (HEAD, dated 2026-06-16); another one is reported on stderr.
CHECKED_COMMIT = "7ce36fa05b84a2c9e758012f1e6da402e1e3a891"
# ppo.py's and ppo_rnn.py's argparse defaults for the values the JSON line reports.
FILE_DEFAULTS = {"num_envs": 1024, "num_steps": 64}

# Run in the peer's interpreter as `python -c DRIVER OUT_JSON CHECKOUT SCRIPT ARGS...`.
DRIVER = r"""
import json, math, os, runpy, sys, types

out_path, checkout, script, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
kept = {}


def _init(*_args, config=None, **_kwargs):
    kept["config"] = config
    return None


def _log(*_args, **_kwargs):
    return None


wandb = types.ModuleType("wandb")
wandb.init, wandb.log, wandb.run = _init, _log, None
sys.modules["wandb"] = wandb
sys.path.insert(0, checkout)
os.chdir(checkout)
sys.argv = [script] + args
runpy.run_path(script, run_name="__main__")

import numpy as np
from logz.batch_logging import batch_logs

config = kept.get("config") or {}
env_name = config.get("ENV_NAME", "")
if "Classic" in env_name:
    from craftax.craftax_classic.constants import Achievement
    max_return = float(len(Achievement))
else:
    from craftax.craftax.constants import ACHIEVEMENT_REWARD_MAP
    max_return = float(np.asarray(ACHIEVEMENT_REWARD_MAP).sum())


def _plain(value):
    value = float(np.mean(np.asarray(value)))
    return None if math.isnan(value) else value


updates = [
    {"update": int(step), "repeats": [{k: _plain(v) for k, v in log.items()} for log in logs]}
    for step, logs in sorted(batch_logs.items())
]
config = {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str, type(None)))}
with open(out_path, "w") as f:
    json.dump({"config": config, "max_return": max_return, "updates": updates}, f)
"""


def checkout_dir() -> Path:
    """The Craftax_Baselines checkout ($VIBE_RL_CRAFTAX_BASELINES_DIR, default /work/craftax_baselines);
    exits with one line when it has no ppo.py."""
    root = Path(os.environ.get(DIR_VARIABLE) or DEFAULT_DIR)
    if not (root / "ppo.py").is_file():
        sys.exit(f"error: {root} has no ppo.py: set {DIR_VARIABLE} to a Craftax_Baselines checkout")
    return root


def checkout_commit(root: Path) -> str | None:
    """The checkout's HEAD, or None where it is not a git work tree (or git is missing)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def crafter_score(success_rates: list[float]) -> float:
    """Crafter's score: the geometric mean of the success rates (percent), offset by 1."""
    return math.exp(sum(math.log(1.0 + s) for s in success_rates) / len(success_rates)) - 1.0


def final_metrics(record: dict[str, Any], env_name: str) -> list[dict[str, Any]]:
    """Per repeat: the file's metrics at the last update in which an episode ended."""
    updates = record["updates"]
    repeats = len(updates[0]["repeats"]) if updates else 0
    results = []
    for r in range(repeats):
        logged = [
            (u["update"], u["repeats"][r]) for u in updates if u["repeats"][r]["episode_return"] is not None
        ]
        if not logged:
            results.append({"repeat": r, "final_update": None, "episode_return": None, "score_pct": None})
            continue
        step, log = logged[-1]
        result = {
            "repeat": r,
            "final_update": step,
            "updates_with_episodes": len(logged),
            "episode_return": log["episode_return"],
            "score_pct": 100.0 * log["episode_return"] / record["max_return"],
            "episode_length": log["episode_length"],
            "achievements": log["achievements"],
        }
        if "Classic" in env_name:
            rates = [v for k, v in log.items() if k.startswith("Achievements/")]
            result["crafter_score"] = crafter_score([v or 0.0 for v in rates])
        results.append(result)
    return results


def run_seed(python: str, root: Path, script: str, argv: list[str]) -> tuple[float, float | None, dict]:
    """One subprocess: the driver running `script` with `argv`. Returns the process's wall time,
    the file's own "Time to run experiment" and the driver's record."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        command = [python, "-c", DRIVER, str(out), str(root), script, *argv]
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        experiment_s = None
        for line in proc.stdout:
            sys.stderr.write(line)
            found = re.match(r"Time to run experiment ([0-9.eE+-]+)", line)
            if found:
                experiment_s = float(found.group(1))
        code = proc.wait()
        wall = time.perf_counter() - start
        if code != 0:
            sys.exit(f"error: {script} exited with {code} (its output is above)")
        record = json.loads(out.read_text())
    return wall, experiment_s, record


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The runner's flags, and the arguments after `--` (passed to the peer's file verbatim)."""
    extra: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, extra = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-name", default="Craftax-Symbolic-v1")
    parser.add_argument("--total-timesteps", type=int, default=1_000_000)
    parser.add_argument("--num-envs", type=int, default=FILE_DEFAULTS["num_envs"], help="the file's default")
    parser.add_argument("--seeds", default="0", help="comma-separated; one process per seed")
    parser.add_argument("--num-repeats", type=int, default=1, help="the file's --num_repeats (vmapped)")
    parser.add_argument("--rnn", action="store_true", help="ppo_rnn.py instead of ppo.py")
    parser.add_argument("--save-json", default="", help="also write the full record here")
    args = parser.parse_args(argv)
    args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not args.seed_list or args.num_repeats < 1:
        parser.error("--seeds needs at least one seed and --num-repeats must be >= 1")
    return args, extra


def main() -> None:
    args, extra = parse_args(sys.argv[1:])
    root = checkout_dir()
    python = os.environ.get(PYTHON_VARIABLE) or sys.executable
    script = "ppo_rnn.py" if args.rnn else "ppo.py"
    commit = checkout_commit(root)
    if commit is not None and commit != CHECKED_COMMIT:
        print(f"note: {root} is at {commit}, the runner was checked at {CHECKED_COMMIT}", file=sys.stderr)

    seeds, walls, experiment_times, config = [], [], [], {}
    for seed in args.seed_list:
        argv = [
            "--env_name", args.env_name,
            "--total_timesteps", str(args.total_timesteps),
            "--num_envs", str(args.num_envs),
            "--seed", str(seed),
            "--num_repeats", str(args.num_repeats),
            *extra,
        ]  # fmt: skip
        print(f"craftax_baselines: {python} {script} {' '.join(argv)}", file=sys.stderr)
        wall, experiment_s, record = run_seed(python, root, script, argv)
        config = record["config"]
        walls.append(wall)
        experiment_times.append(experiment_s)
        seeds.append({"seed": seed, "wall_s": wall, "finals": final_metrics(record, args.env_name), **record})

    finals = [f for s in seeds for f in s["finals"] if f["episode_return"] is not None]
    mean = lambda key: sum(f[key] for f in finals) / len(finals) if finals else None
    num_steps = config.get("NUM_STEPS", FILE_DEFAULTS["num_steps"])
    num_envs = config.get("NUM_ENVS", args.num_envs)
    result = {
        "peer": f"Craftax_Baselines/{script}",
        "commit": commit,
        "env": args.env_name,
        "total_timesteps": args.total_timesteps,
        "trained_timesteps": config.get("NUM_UPDATES", 0) * num_steps * num_envs,
        "num_envs": num_envs,
        "num_steps": num_steps,
        "seeds": args.seed_list,
        "num_repeats": args.num_repeats,
        "wall_s": round(sum(walls), 2),
        "wall_s_per_seed": [round(w, 2) for w in walls],
        "experiment_s_per_seed": [None if t is None else round(t, 2) for t in experiment_times],
        "max_return": seeds[0]["max_return"],
        "score_pct": mean("score_pct"),
        "episode_return": mean("episode_return"),
        "achievements": mean("achievements"),
        "per_seed": [
            {"seed": s["seed"], **{k: v for k, v in f.items() if k != "repeat"}, "repeat": f["repeat"]}
            for s in seeds
            for f in s["finals"]
        ],
    }
    if "Classic" in args.env_name:
        result["crafter_score"] = mean("crafter_score")
    if args.save_json:
        curves = [{"seed": s["seed"], "updates": s["updates"]} for s in seeds]
        full = dict(result, config=config, curves=curves)
        Path(args.save_json).write_text(json.dumps(full, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
