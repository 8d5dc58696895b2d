"""What Rainbow's components cost, against c51_jax, at c51_jax's Breakout-MinAtar configuration (the suite's
entry: 8 envs, a 100k buffer, batch 32, a gradient step every 8 env steps, 51 atoms on [-10, 10], Double
DQN's selection), each `make_train` as one jitted program (benchmark/inprocess.py), the variants
interleaved round by round, best of --rounds:

  c51_jax                 c51_jax.py itself
  rainbow, C51's parts    rainbow_jax.py with what C51 lacks switched off: --no-prioritized --n-step 1
                          --no-dueling --no-noisy (Double DQN's selection on, as the suite's c51 entry)
  rainbow                 rainbow_jax.py with every component on (its sum tree, its window, its noise)

    python -m benchmark.oneoff.rainbow_speed --total-timesteps 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import json

from benchmark.speed import inprocess, interleave

C51_MINATAR = {  # benchmark/suite.toml's c51_jax Breakout-MinAtar entry, as Args fields
    "env_id": "Breakout-MinAtar",
    "num_envs": 8,
    "buffer_size": 100_000,
    "batch_size": 32,
    "learning_rate": 5e-4,
    "train_frequency": 8,
    "target_network_frequency": 8000,
    "learning_starts": 5000,
    "end_e": 0.01,
    "exploration_fraction": 0.1,
    "double_dqn": True,
    "v_min": -10.0,
    "v_max": 10.0,
    "n_atoms": 51,
    "log_frequency": 8000,
}
C51_PARTS = {"prioritized": False, "n_step": 1, "dueling": False, "noisy": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    cli = parser.parse_args()
    settings = {**C51_MINATAR, "total_timesteps": cli.total_timesteps}
    items = lambda extra: [f"{name}={value}" for name, value in {**settings, **extra}.items()]
    variants = {
        "c51_jax": inprocess("c51_jax", *items({})),
        "rainbow, C51's parts": inprocess("rainbow_jax", *items(C51_PARTS)),
        "rainbow": inprocess("rainbow_jax", *items({})),
    }
    results = interleave(variants, cli.rounds, "rainbow")
    base = results["c51_jax"]["train_s"]
    print(json.dumps({name: {k: v for k, v in r.items() if k != "samples"} for name, r in results.items()}))
    for name, result in results.items():
        print(f"{name:<22} training {result['train_s']:.2f} s ({result['train_s'] / base:.2f}x c51_jax)")


if __name__ == "__main__":
    main()
