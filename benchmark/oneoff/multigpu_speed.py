"""Speed of ppo_multigpu.py against ppo_jax_scan.py, same config, same process.

On one device the sharded script must cost ~nothing: this times the chunk the CLI compiles
(built by the scripts' own run harness: plan_runs, initial_state, compile_chunk; all iterations in
one chunk, compile excluded, best of --repeats) and prints env steps/s per seed and their ratio.
On several devices (a GPU machine, or CPU with XLA_FLAGS=--xla_force_host_platform_device_count=N)
it times ppo_multigpu.py twice more: one seed per device (--data-devices 1, a seed per device)
and one seed's envs split over all of them (--data-devices 0).

    python -m benchmark.oneoff.multigpu_speed --num-envs 8
    python -m benchmark.oneoff.multigpu_speed --num-envs 65536 --num-steps 16 --multi-only   # GPUs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from types import ModuleType
from typing import Any

import jax
import numpy as np

from benchmark.ceiling import best_time
from vibe_rl import ppo_jax_scan, ppo_multigpu


def config(cli: argparse.Namespace) -> dict[str, Any]:
    batch = cli.num_envs * cli.num_steps
    return dict(
        env_id=cli.env_id,
        num_envs=cli.num_envs,
        num_steps=cli.num_steps,
        num_minibatches=cli.num_minibatches,
        update_epochs=cli.update_epochs,
        total_timesteps=batch * cli.iterations,
        num_chunks=1,
    )


def time_script(script: ModuleType, cli: argparse.Namespace, **flags: Any) -> float:
    """Env steps/s per seed of one compiled chunk of cli.iterations iterations, as the CLI runs it."""
    args = script.Flags(**config(cli), **flags)
    with tempfile.TemporaryDirectory() as output_dir:  # the runs' output directory (unused)
        run = script.plan_runs(dataclasses.replace(args, output_dir=output_dir))[0]
    state = script.initial_state(run, None)
    chunk = script.compile_chunk(run, state)
    seconds = best_time(lambda: chunk(state, np.int32(0)), cli.repeats)
    return run.algo.num_iterations * run.algo.env_steps_per_iteration / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument(  # --updates: its name before the scripts called them iterations
        "--iterations", "--updates", type=int, default=50, help="PPO iterations in the timed chunk"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--multi-only", action="store_true", help="skip the one-device comparison")
    cli = parser.parse_args()

    devices = jax.device_count()
    result: dict[str, Any] = {
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.devices()[0].platform,
        "devices": devices,
        **config(cli),
    }
    # one seed per device: on one device, the program of ppo_jax_scan plus the mesh's constraints
    one_per_device = dict(data_devices=1, num_seeds=devices, fsdp=cli.fsdp)
    if not cli.multi_only:
        # interleave the two scripts so that machine noise hits both alike
        scan, multi = [], []
        for _ in range(2):
            scan.append(time_script(ppo_jax_scan, cli))
            multi.append(time_script(ppo_multigpu, cli, **one_per_device))
        result["ppo_jax_scan_sps"] = round(max(scan))
        result["ppo_multigpu_1dev_sps"] = round(max(multi))
        result["ratio_1dev"] = round(max(multi) / max(scan), 3)
    if devices > 1:
        result[f"ppo_multigpu_{devices}dev_sps"] = round(time_script(ppo_multigpu, cli, fsdp=cli.fsdp))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
