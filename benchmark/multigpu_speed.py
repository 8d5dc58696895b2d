"""Speed of ppo_multigpu.py against ppo_jax_scan.py, same config, same process.

On one device the sharded script must cost ~nothing: this times one compiled chunk of
PPO updates of each script (compile excluded, best of --repeats) and prints env steps/s
and their ratio. On several devices (a GPU machine, or CPU with
XLA_FLAGS=--xla_force_host_platform_device_count=N) it also times ppo_multigpu.py with
the env batch sharded over all of them.

    python -m benchmark.multigpu_speed --num-envs 8
    python -m benchmark.multigpu_speed --num-envs 65536 --num-steps 16 --multi-only   # GPUs
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from benchmark.ceiling import best_time

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "vibe_rl" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def config(cli: argparse.Namespace) -> dict[str, Any]:
    batch = cli.num_envs * cli.num_steps
    return dict(
        env_id=cli.env_id,
        num_envs=cli.num_envs,
        num_steps=cli.num_steps,
        num_minibatches=cli.num_minibatches,
        update_epochs=cli.update_epochs,
        total_timesteps=batch * cli.updates,
        num_chunks=1,
    )


def time_scan(cli: argparse.Namespace) -> float:
    """Env steps/s of ppo_jax_scan.py: one chunk of cli.updates updates."""
    ppo = load("ppo_jax_scan")
    args = ppo.validate_args(ppo.Args(**config(cli)))
    agent = ppo.build_ppo(args, ppo.make_env(args.env_id))
    state = jax.jit(jax.vmap(agent.init))(jax.random.PRNGKey(0)[None])
    run = jax.jit(jax.vmap(agent.run_chunk, in_axes=(0, None)))
    seconds = best_time(lambda: run(state, jnp.asarray(0, jnp.int32)), cli.repeats)
    return args.num_iterations * args.batch_size / seconds


def time_multigpu(cli: argparse.Namespace, num_devices: int) -> float:
    """Env steps/s of ppo_multigpu.py on the first num_devices devices, sharded."""
    ppo = load("ppo_multigpu")
    args = ppo.validate_args(ppo.Args(**config(cli), fsdp=cli.fsdp), num_devices=num_devices)
    mesh = ppo.make_mesh(jax.devices()[:num_devices])
    agent = ppo.build_ppo(args, ppo.make_env(args.env_id), mesh)
    keys = jax.random.PRNGKey(0)[None]
    shardings = ppo.state_shardings(jax.eval_shape(jax.vmap(agent.init), keys), mesh, cli.fsdp, True)
    replicated = ppo.NamedSharding(mesh, ppo.P())
    state = jax.jit(jax.vmap(agent.init), out_shardings=shardings)(keys)
    run = jax.jit(
        jax.vmap(agent.run_chunk, in_axes=(0, None)),
        in_shardings=(shardings, replicated),
        out_shardings=(shardings, replicated),
    )
    seconds = best_time(lambda: run(state, jnp.asarray(0, jnp.int32)), cli.repeats)
    return args.num_iterations * args.batch_size / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--updates", type=int, default=50, help="PPO updates in the timed chunk")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--multi-only", action="store_true", help="skip the one-device comparison")
    cli = parser.parse_args()

    result: dict[str, Any] = {
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.devices()[0].platform,
        "devices": jax.device_count(),
        **config(cli),
    }
    if not cli.multi_only:
        # interleave the two scripts so that machine noise hits both alike
        scan, multi = [], []
        for _ in range(2):
            scan.append(time_scan(cli))
            multi.append(time_multigpu(cli, 1))
        result["ppo_jax_scan_sps"] = round(max(scan))
        result["ppo_multigpu_1dev_sps"] = round(max(multi))
        result["ratio_1dev"] = round(max(multi) / max(scan), 3)
    if jax.device_count() > 1:
        result[f"ppo_multigpu_{jax.device_count()}dev_sps"] = round(time_multigpu(cli, jax.device_count()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
