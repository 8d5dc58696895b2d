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


def parse_ppo_args(description: str) -> argparse.Namespace:
    """The PPO flags of vibe_rl/ppo_jax_scan.py that a peer can match (CleanRL's defaults)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--clip-coef", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--output-dir", default="runs")
    parser.add_argument("--exp-name", default=None)
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
