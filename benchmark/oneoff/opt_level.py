"""The harness's chunk compiled at XLA backend optimisation levels: compile time against run time.

    python -m benchmark.oneoff.opt_level ppo_jax_scan --levels default,2,1 --rounds 2
    python -m benchmark.oneoff.opt_level dqn_jax --levels default,1 -- --total-timesteps 200000
    python -m benchmark.oneoff.opt_level ppo_jax_scan -- --env-id Breakout-MinAtar --network cnn --num-envs 16

Every (round, level) is one process: it builds the run as the script's command line would
(the flags after `--`), sets the level as the algorithm's `chunk_cpu_opt_level` ("default":
None, XLA's default), compiles the chunk with the harness's own compile_chunk and no
compilation cache, then times every chunk of the run called back to back (best of 3; no
logging). The levels alternate round by round. The PPO scripts compile their chunk at level
1, the others at XLA's default; docs/harness.md ("What the harness does for speed") has the figures
that decided it.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time


def measure(script: str, level: str, flags: list[str]) -> str:
    """In this process: compile the chunk as the harness does (compile_chunk) at `level`, then
    time the run's chunks; one summary line."""
    module = importlib.import_module(f"vibe_rl.{script}")
    sys.argv = [script, *flags, "--jax-cache-dir", ""]
    args = module.parse_flags(module.Flags)
    module.start_jax(args)
    run = module.plan_runs(args)[0]
    chunk_level = None if level == "default" else int(level)
    run = run._replace(algo=run.algo._replace(chunk_cpu_opt_level=chunk_level))
    state = module.initial_state(run, None)
    start = time.perf_counter()
    chunk = module.compile_chunk(run, state)
    compile_s, runs = time.perf_counter() - start, []
    for _ in range(3):
        start, s = time.perf_counter(), state
        for index in range(run.num_chunks):
            s = chunk(s, module.np.int32(index * run.iterations_per_chunk)).state
        module.jax.block_until_ready(s)
        runs.append(time.perf_counter() - start)
    return f"compile {compile_s:.2f} s, run best {min(runs):.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", help="a module of vibe_rl, e.g. ppo_jax_scan")
    parser.add_argument("--levels", default="default,1", help="comma-separated: default, 0, 1, 2, 3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: measure this level here
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
            this_level = [sys.executable, "-m", "benchmark.oneoff.opt_level", cli.script, "--one", level]
            done = subprocess.run([*this_level, "--", *cli.flags], capture_output=True, text=True, check=True)
            result = done.stdout.strip().splitlines()[-1]
            print(f"round {r + 1}: {cli.script} level {level}: {result}", flush=True)


if __name__ == "__main__":
    main()
