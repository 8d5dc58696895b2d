"""What an import in a thread costs the driver's dispatches: why, on an accelerator, the chunks wait for
matplotlib's import (`chunks_wait_for_thread` in the harness).

The driver waits for each chunk in Python (`wait_for`: `is_ready()` and a 1 ms sleep) and then
dispatches the next. That needs the GIL; an import in another thread holds it while it runs module
code. This runs the driver's loop on a tiny program for one second, `wait_for(program(x))` over and
over, in a fresh process, alone and with `import matplotlib.figure` in a thread started with it, and
prints the rounds' mean and worst time. Interleaved, best (lowest mean) of --repeats each:

    python -m benchmark.oneoff.import_beside
    python -m benchmark.oneoff.import_beside --repeats 5

On a GPU a CartPole chunk at 2048 envs takes about 0.08 s, so a round delayed by tens of ms idles
the device for that long (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

ROUNDS = r"""
import importlib, sys, threading, time
import jax, jax.numpy as jnp

program = jax.jit(lambda x: x * 1.0001 + 1)
x = program(jnp.zeros(1000)).block_until_ready()

def wait_for(tree):  # as the harness's
    while not tree.is_ready():
        time.sleep(0.001)
    return tree

importing = threading.Thread(target=importlib.import_module, args=("matplotlib.figure",))
start = last = time.perf_counter()
if sys.argv[1] == "import":
    importing.start()
rounds, worst = 0, 0.0
while time.perf_counter() - start < 1.0:
    x = wait_for(program(x))
    now = time.perf_counter()
    rounds, worst, last = rounds + 1, max(worst, now - last), now
print(1000 / rounds, 1000 * worst)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    cli = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"alone": [], "import": []}
    for _ in range(cli.repeats):
        for mode in results:
            command = [sys.executable, "-c", ROUNDS, mode]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            mean, worst = (float(v) for v in out.split())
            results[mode].append((mean, worst))
    for mode, runs in results.items():
        mean, worst = min(runs)
        beside = "with `import matplotlib.figure` in a thread" if mode == "import" else "alone"
        print(f"{beside}: a dispatch-and-wait round {mean:.2f} ms on average, the worst {worst:.1f} ms")


if __name__ == "__main__":
    main()
