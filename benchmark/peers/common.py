"""What the peer runners share: the flags (spelled like vibe_rl's scripts) and the run
directory they write, so the harness reads a peer's run exactly like one of ours.

A runner is launched by the harness with the peer's own interpreter (its own venv), e.g.
    VIBE_RL_SB3_PYTHON=/tmp/peers-venv/bin/python python -m benchmark --peers
and imports this file from its own directory.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

# The flags and their defaults (CleanRL ppo.py's CartPole config, as ppo_jax_scan's).
PPO_FLAGS: dict[str, Any] = {
    "env-id": "CartPole-v1",
    "seed": 1,
    "total-timesteps": 500_000,
    "num-envs": 4,
    "num-steps": 128,
    "update-epochs": 4,
    "num-minibatches": 4,
    "learning-rate": 2.5e-4,
    "clip-coef": 0.2,
    "ent-coef": 0.01,
    "vf-coef": 0.5,
    "max-grad-norm": 0.5,
    "gamma": 0.99,
    "gae-lambda": 0.95,
    "eval-episodes": 32,
    "output-dir": "runs",
    "exp-name": "",
}


def parse_ppo_args(description: str) -> argparse.Namespace:
    """The PPO flags of vibe_rl/ppo_jax_scan.py that a peer can match, spelled the same."""
    parser = argparse.ArgumentParser(description=description)
    for name, default in PPO_FLAGS.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    return parser.parse_args()


def write_run(args: argparse.Namespace, exp_name: str, returns: list[float], lengths: list[int]) -> Path:
    """{output_dir}/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json and eval.json."""
    run_dir = Path(args.output_dir) / f"{args.env_id}__{exp_name}__{args.seed}__{int(time.time())}"
    run_dir.mkdir(parents=True)
    (run_dir / "args.json").write_text(json.dumps(vars(args), indent=2))
    summary: dict[str, Any] = {
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in lengths],
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "episodes": len(returns),
        "global_step": args.total_timesteps,
    }
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    print(
        f"{run_dir}: eval return {summary['mean']:.2f} +- {summary['std']:.2f} over {len(returns)} episodes"
    )
    return run_dir
