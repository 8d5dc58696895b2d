"""The harness's chunk compiled at XLA backend optimisation levels: compile time against run time.

    python -m benchmark.opt_level ppo_jax_scan --levels default,2,1 --rounds 2
    python -m benchmark.opt_level dqn_jax --levels default,1 -- --total-timesteps 200000
    python -m benchmark.opt_level ppo_jax_scan -- --env-id Breakout-MinAtar --network cnn --num-envs 16

Every (round, level) is one process: it builds the run as the script's command line would (the
flags after `--`), compiles the harness's chunk program with no compilation cache, then times
every chunk of the run called back to back (best of 3; no logging). The levels alternate round
by round. The harness compiles its chunk at XLA's default level; docs/benchmarks.md has the
figures that decided it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import subprocess
import sys
import time


def measure(script: str, level: str, flags: list[str]) -> str:
    """In this process: compile the chunk at `level`, time the run's chunks; one summary line."""
    module = importlib.import_module(f"vibe_rl.{script}")
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sys.argv = [script, *flags, "--jax-cache-dir", ""]
    args = module.tyro.cli(module.Args)
    module.start_jax(args)
    run = module.open_run(args)
    state = module.initial_state(run, None)
    start = time.perf_counter()
    options = None if level == "default" else {"xla_backend_optimization_level": int(level)}
    per_seed = functools.partial(module.run_chunk, run.algo, run.units_per_chunk)
    shardings = jax.tree.map(lambda x: x.sharding, state)  # as the harness's compile_chunk
    replicated, by_seed = NamedSharding(run.mesh, P()), NamedSharding(run.mesh, P("seeds"))
    batched = jax.vmap(per_seed, (0, None), spmd_axis_name="seeds")
    jitted = jax.jit(batched, in_shardings=(shardings, replicated), out_shardings=(shardings, by_seed))
    chunk = jitted.lower(state, np.int32(0)).compile(options)
    compile_s, runs = time.perf_counter() - start, []
    for _ in range(3):
        start, s = time.perf_counter(), state
        for index in range(run.num_chunks):
            s, _ = chunk(s, np.int32(index * run.units_per_chunk))
        jax.block_until_ready(s)
        runs.append(time.perf_counter() - start)
    return f"{script} level {level}: compile {compile_s:.2f} s, run best {min(runs):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", help="a module of vibe_rl, e.g. ppo_jax_scan")
    parser.add_argument("--levels", default="default,1", help="comma-separated: default, 0, 1, 2, 3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this level here
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)  # the script's flags follow --
    cli = parser.parse_args(argv[:split])
    cli.flags = argv[split + 1 :]
    if cli.one is not None:
        print(measure(cli.script, cli.one, cli.flags), flush=True)
        return
    levels = cli.levels.split(",")
    for r in range(cli.rounds):
        for level in levels[r % len(levels) :] + levels[: r % len(levels)]:
            command = [sys.executable, "-m", "benchmark.opt_level", cli.script, "--one", level, "--"]
            done = subprocess.run(command + cli.flags, capture_output=True, text=True, check=True)
            print(f"round {r + 1}: {done.stdout.strip().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
