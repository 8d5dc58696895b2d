"""Time a vibe_rl script's `make_train(args)` as one jitted program, as the peer runners time
theirs (PureJaxRL's `make_train`, rejax's `train`): compiled once, then called.

    python -m benchmark.inprocess ppo_jax_scan --repeats 3 --set num_envs=4 --set total_timesteps=500000
    python -m benchmark.inprocess dqn_jax --num-seeds 8 --set num_envs=10
    python -m benchmark.inprocess ppo_rnn_jax --set total_timesteps=500000 --set hidden_size=128
    python -m benchmark.inprocess td3_jax --set total_timesteps=10000 --set hidden_size=64 --set tau=0.05

Any script with make_train(args), make_algorithm(args) and an episodic_return metric works;
benchmark/speed.py times ppo_jax_scan, dqn_jax, ppo_rnn_jax and td3_jax so.

Prints, like the peer runners:
    compiled vibe_rl ppo_jax_scan in 9.8s
    trained 499,712 steps in 4.31s          (once per repeat; the report takes the best)
With --num-seeds S the program is jax.vmap(train) over S seeds, on one device.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import time
import typing

import jax
import numpy as np


def parse_value(field: dataclasses.Field, text: str):
    """A --set value as the Args field's type: int, float, bool, str or None."""
    kind = str(field.type)
    if text == "None":
        return None
    if "bool" in kind:
        return text.lower() in ("1", "true", "yes")
    for name, cast in (("int", int), ("float", float)):
        if name in kind:
            return cast(text)
    return text


def parse_settings(args_type: type, items: list[str]) -> dict[str, typing.Any]:
    """--set FIELD=VALUE items -> {field: value}, each value as its Args field's type."""
    known = {f.name: f for f in dataclasses.fields(args_type)}
    settings = {}
    for item in items:
        name, _, text = item.partition("=")
        settings[name] = parse_value(known[name], text)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", help="a module of vibe_rl, e.g. ppo_jax_scan")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--num-seeds", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="an Args field")
    cli = parser.parse_args()
    module = importlib.import_module(f"vibe_rl.{cli.script}")
    args = module.Flags(**parse_settings(module.Flags, cli.set))
    algo = module.make_algorithm(args)
    train = module.make_train(args)
    keys = np.stack(
        [np.asarray(jax.random.PRNGKey(seed)) for seed in range(args.seed, args.seed + cli.num_seeds)]
    )
    program = jax.jit(jax.vmap(train)) if cli.num_seeds > 1 else jax.jit(train)
    inputs = keys if cli.num_seeds > 1 else keys[0]
    start = time.perf_counter()
    compiled = program.lower(inputs).compile()
    print(f"compiled vibe_rl {cli.script} in {time.perf_counter() - start:.1f}s", flush=True)
    steps = algo.num_iterations * algo.env_steps_per_iteration
    for _ in range(cli.repeats):
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(compiled(inputs))
        print(f"trained {steps:,} steps in {time.perf_counter() - start:.2f}s", flush=True)
    returns = np.asarray(typing.cast(typing.Any, metrics).episodic_return)
    tail = returns[..., -max(1, returns.shape[-1] // 10) :]
    print(f"final training return {np.nanmean(tail):.1f} (mean over the last tenth of the logged points)")


if __name__ == "__main__":
    main()
