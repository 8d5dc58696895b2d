"""How much of a PPO iteration is the rollout: `ppo_jax_scan`'s rollout alone and its whole
iteration, each as one jitted lax.scan over the run's iterations, timed in one process,
interleaved (best of --repeats).

    python -m benchmark.oneoff.rollout_share                      # CleanRL's CartPole config, 500k steps
    python -m benchmark.oneoff.rollout_share --set num_envs=16 --set env_id=Acrobot-v1

Prints, per repeat:
    rollout 0.55 s   whole iteration 3.12 s
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp

from benchmark.inprocess import parse_settings
from vibe_rl import ppo_jax_scan as ppo_module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="an Args field")
    cli = parser.parse_args()
    cleanrl_cartpole = {"num_envs": 4, "num_steps": 128, "total_timesteps": 500_000}
    setup = ppo_module.build_setup(
        ppo_module.Flags(**cleanrl_cartpole | parse_settings(ppo_module.Flags, cli.set))
    )
    num_iterations = setup.sizes.num_iterations
    state = jax.jit(functools.partial(ppo_module.init_state, setup))(jax.random.PRNGKey(0))

    def rollouts(state: ppo_module.RunnerState) -> jax.Array:
        def one(state: ppo_module.RunnerState, _: None) -> tuple[ppo_module.RunnerState, jax.Array]:
            state, trajectory = ppo_module.rollout(setup, state)
            return state, trajectory.reward.sum()  # an output, so that nothing is compiled away

        return jax.lax.scan(one, state, None, length=num_iterations)[1]

    def iterations(state: ppo_module.RunnerState) -> ppo_module.Metrics:
        one_iteration = functools.partial(ppo_module.iteration, setup)
        _, metrics = jax.lax.scan(one_iteration, state, jnp.arange(num_iterations))
        return metrics

    programs = {
        name: jax.jit(f).lower(state).compile()
        for name, f in (("rollout", rollouts), ("iteration", iterations))
    }
    best = {name: float("inf") for name in programs}
    for _ in range(cli.repeats):
        times = {}
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program(state))
            times[name] = time.perf_counter() - start
            best[name] = min(best[name], times[name])
        print(f"rollout {times['rollout']:.2f} s   whole iteration {times['iteration']:.2f} s", flush=True)
    rollout, whole = best["rollout"], best["iteration"]
    print(
        f"best: rollout {rollout:.2f} s of {whole:.2f} s ({rollout / whole:.0%}), {num_iterations} iterations"
    )


if __name__ == "__main__":
    main()
