"""The driver's host work per chunk, taken apart, and what of it the device waits for.

Between two chunks the harness's driver (`train_chunks`) brings each chunk's results to the host
and writes them out: every seed's metrics to TensorBoard and metrics.jsonl, a checkpoint where one
is due (`--checkpoint-frequency`; by default a tenth of the run), a progress line. It dispatches
the next chunk first and writes in a thread, so the writing overlaps the training. This measures,
in one process, with the scripts' own harness (plan_runs, initial_state, compile_chunk,
train_chunks) and, unless --num-chunks says otherwise, their default `--num-chunks 10`:

- **chunk**: one chunk's compute, the chunks run back to back with no host work;
- **pieces**, each for one chunk of every seed, in ms: the device-to-host transfer of the metrics
  and of the state, the metrics' rows, the event files, metrics.jsonl, the checkpoints, the
  progress line; `host` is their sum for a chunk that checkpoints;
- **not overlapped**: the host work the device waits for, per gap between two chunks. The driver
  runs as `train_chunks` (the final evaluation included), its dispatches and its waits timed; as on
  an accelerator's in-order stream, chunk k+1 starts at its dispatch or at chunk k's end, whichever
  is later, and runs a chunk's compute; the device idles from chunk k's end to chunk k+1's
  dispatch (`device_idle`);
- **added wall**: the driver's whole run less the chunks and evaluation alone, per chunk. On a CPU
  the host work also takes cores from the chunk; on a shared machine this is noisy. Best of
  --repeats each, the two interleaved.

    python -m benchmark.oneoff.driver_overhead                  # PPO at 1, 8, 64, 256 seeds; DQN's buffer
    python -m benchmark.oneoff.driver_overhead --num-seeds 64   # the bar: PPO CartPole, 64 seeds

With one --num-seeds its last line holds the bar of issue 50: the host work the device waits for is
at most 10% of the chunk's compute. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import jax
import numpy as np

from vibe_rl import dqn_jax, ppo_jax_scan

BAR = 0.10  # the share of the chunk's compute the device may wait for the host


class Case(NamedTuple):  # one workload: a script and its flags
    name: str
    script: ModuleType
    flags: dict[str, Any]


def cases(cli: argparse.Namespace) -> list[tuple[Case, int]]:
    ppo = Case("PPO CartPole", ppo_jax_scan, dict(total_timesteps=cli.ppo_steps, num_chunks=cli.num_chunks))
    dqn = Case(  # the state's size: a 1M-transition replay buffer per seed
        "DQN CartPole, 1M buffer",
        dqn_jax,
        dict(
            total_timesteps=cli.dqn_steps,
            buffer_size=1_000_000,
            learning_starts=min(10_000, cli.dqn_steps // 2),  # a short run (gpu.sh's smoke) still learns
            num_chunks=cli.num_chunks,
        ),
    )
    chosen = [(ppo, seeds) for seeds in cli.num_seeds]
    return chosen + ([(dqn, seeds) for seeds in cli.dqn_seeds] if not cli.ppo_only else [])


def clock(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall seconds of fn() over `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(case: Case, num_seeds: int, output_dir: Path, repeats: int) -> dict[str, float]:
    """The figures of one case, in ms per chunk."""
    h = case.script
    args = h.Flags(env_id="CartPole-v1", num_seeds=num_seeds, output_dir=str(output_dir), **case.flags)
    with contextlib.redirect_stdout(io.StringIO()):  # the harness's own progress lines
        run = h.make_run_dirs(h.plan_runs(args))[0]
        state = h.initial_state(run, None)
        chunk = h.compile_chunk(run, state)
        evaluate: Future = Future()
        evaluate.set_result(h.compile_evaluate(run, state))
    per_chunk, num_chunks = run.iterations_per_chunk, run.num_chunks

    def alone() -> None:  # the device's work alone: the chunks back to back, then the final evaluation
        s = state
        for index in range(num_chunks):
            s = h.wait_for(chunk(s, np.int32(index * per_chunk))).state
        h.wait_for(evaluate.result()(s))

    dispatched, ready = [], []  # each chunk's dispatch by the driver, and when its wait_for returned

    def dispatch(s: Any, first: np.int32) -> Any:
        dispatched.append(time.perf_counter())
        return chunk(s, first)

    def wait_for(tree: Any, harness_wait_for: Callable = h.wait_for) -> Any:
        tree = harness_wait_for(tree)
        ready.append(time.perf_counter()) if isinstance(tree, h.ChunkOutput) else None
        return tree

    def driver() -> float:  # the same, as train_chunks runs them; the device's idle seconds between chunks
        dispatched.clear(), ready.clear()
        with contextlib.redirect_stdout(io.StringIO()), patched(h, "wait_for", wait_for):
            _, loggers, _, _ = h.train_chunks(run, dispatch, evaluate, state, 0, [])
        for logger in loggers:
            logger.close()
        return device_idle(dispatched, ready[0], compute)

    compute = clock(alone, 1) / num_chunks  # the chunk's compute, for device_idle (then timed again below)
    driver()  # warm: first-call costs (thread start, event files made)
    seconds, idle = {"alone": [], "driver": []}, []
    for _ in range(repeats):  # interleaved: machine noise hits both alike
        seconds["alone"].append(clock(alone, 1))
        start = time.perf_counter()
        idle.append(driver())
        seconds["driver"].append(time.perf_counter() - start)
        compute = min(seconds["alone"]) / num_chunks
    alone_s, driver_s = min(seconds["alone"]), min(seconds["driver"])

    # the pieces, for the first chunk's output
    output = h.wait_for(chunk(state, np.int32(0)))
    metrics = h.to_host(output.metrics)
    host_state = h.to_host(output.state)
    loggers = [h.RunLogger(d, args, 0) for d in run.dirs]
    step_of = lambda j: (j + 1) * run.algo.env_steps_per_iteration
    chunk_rows = h.ChunkRows(0, per_chunk, metrics, 0.0, {}, step_of(per_chunk - 1), None, {}, set())
    rows = lambda: [h.seed_points(run, chunk_rows, i) for i in range(num_seeds)]
    every_seeds_rows = rows()
    write_all = lambda: [logger.write(r) for logger, r in zip(loggers, every_seeds_rows, strict=True)]
    logs = clock(write_all, repeats)
    for logger in loggers:  # the rows without their TensorBoard events: metrics.jsonl alone
        logger.append_events = lambda events: None
    jsonl = clock(write_all, repeats)
    checkpoint = lambda: [
        h.save_checkpoint(run.dirs[i], per_chunk, step_of(per_chunk - 1), h.seed_slice(host_state, i))
        for i in range(num_seeds)
    ]
    line = f"[{'#' * 4:-<20}] {1:>10,}/{2:,} steps | {3:,.0f} SPS | return {4.0:8.2f} | {5.0:6.1f}s"
    with contextlib.redirect_stdout(io.StringIO()):
        progress = clock(lambda: h.say(line), repeats)
    ms = 1000
    figures = {
        "transfer metrics": clock(lambda: h.to_host(output.metrics), repeats) * ms,
        "transfer state": clock(lambda: h.to_host(output.state), repeats) * ms,
        "rows": clock(rows, repeats) * ms,
        "events": max(0.0, logs - jsonl) * ms,
        "jsonl": jsonl * ms,
        "checkpoint": clock(checkpoint, repeats) * ms,
        "progress": progress * ms,
    }
    figures["host"] = sum(figures.values())
    figures["chunk"] = (alone_s / num_chunks) * ms  # the evaluation's share is tiny beside a chunk
    figures["not overlapped"] = min(idle) / max(1, num_chunks - 1) * ms
    figures["added wall"] = (driver_s - alone_s) / num_chunks * ms
    figures["chunks"] = num_chunks
    figures["state MB"] = sum(x.nbytes for x in jax.tree.leaves(host_state)) / 2**20
    return figures


def device_idle(dispatched: list[float], first_ready: float, compute: float) -> float:
    """Seconds the device sat idle between chunks, on an accelerator's in-order stream: chunk k+1 starts
    at its dispatch or when chunk k ends, whichever is later, and runs `compute` seconds; the device idles
    from chunk k's end to chunk k+1's dispatch. On a CPU the host work also takes cores from the chunk:
    the `added wall` column, the whole run's extra time (noisy on a shared machine)."""
    idle, end = 0.0, first_ready
    for at in dispatched[1:]:
        idle += max(0.0, at - end)
        end = max(at, end) + compute
    return idle


@contextlib.contextmanager
def patched(module: ModuleType, name: str, value: Any) -> Any:
    """module.name replaced by value inside the block (the harness looks its functions up at call time)."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


COLUMNS = ["transfer metrics", "transfer state", "rows", "events", "jsonl", "checkpoint", "progress", "host"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    seeds = lambda text: [int(x) for x in text.split(",")]
    parser.add_argument("--num-seeds", type=seeds, default=[1, 8, 64, 256], help="PPO's, comma-separated")
    parser.add_argument("--dqn-seeds", type=seeds, default=[1, 8], help="DQN's (a 1M buffer each)")
    parser.add_argument("--ppo-steps", type=int, default=50_000, help="PPO's env steps per seed")
    parser.add_argument("--dqn-steps", type=int, default=50_000, help="DQN's env steps per seed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-chunks", type=int, default=10, help="as the scripts' flag (10: their default)")
    parser.add_argument("--ppo-only", action="store_true", help="leave out DQN")
    parser.add_argument("--jax-cache-dir", default="~/.cache/vibe_rl/jax", help="as the scripts' flag")
    cli = parser.parse_args()
    cli.ppo_only |= len(cli.num_seeds) == 1  # --num-seeds 64: the bar alone
    ppo_jax_scan.start_jax(ppo_jax_scan.Flags(jax_cache_dir=cli.jax_cache_dir))  # before JAX starts, as a run

    print(
        f"{jax.devices()[0].device_kind}, {jax.device_count()} device(s); ms per chunk, best of {cli.repeats}"
    )
    print(
        f"| case | seeds | state MB | {' | '.join(COLUMNS)} | chunk | added wall | not overlapped | share |"
    )
    print("|---" * (len(COLUMNS) + 7) + "|")
    results = []
    for case, num_seeds in cases(cli):
        with tempfile.TemporaryDirectory() as output_dir:
            f = measure(case, num_seeds, Path(output_dir), cli.repeats)
        share = max(0.0, f["not overlapped"]) / f["chunk"]
        cells = " | ".join(f"{f[c]:.1f}" for c in COLUMNS)
        print(f"| {case.name} | {num_seeds} | {f['state MB']:.1f} | {cells} | {f['chunk']:.1f} | "
              f"{f['added wall']:.1f} | {f['not overlapped']:.1f} | {share:.1%} |", flush=True)  # fmt: skip
        results.append((case, num_seeds, f, share))
    if len(results) == 1:
        case, num_seeds, f, share = results[0]
        verdict = "met" if share <= BAR else "NOT met"
        print(f"{case.name}, {num_seeds} seeds: host work {f['host']:.1f} ms per chunk that checkpoints; "
              f"not overlapped {max(0.0, f['not overlapped']):.1f} ms per chunk = {share:.1%} of the chunk's "
              f"compute ({f['chunk']:.1f} ms); the bar, at most {BAR:.0%}: {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
