"""The speed ceiling: raw gymnax throughput with random actions in one compiled scan.

A training script can never step its environments faster than this, at the same number
of parallel envs on the same machine; the benchmarks report training steps/s as a
fraction of it.

    python -m benchmark.ceiling --env-id CartPole-v1 --num-envs 4
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnax
import jax
import jax.numpy as jnp


def best_time(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Best wall time of fn() over `repeats` calls, after one warm-up call (compilation)."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best


def make_random_rollout(env_id: str, num_envs: int, num_steps: int) -> Callable[[jax.Array], jax.Array]:
    """A jitted function key -> summed reward of num_steps x num_envs random-action steps."""
    if env_id.startswith("brax/"):  # the scripts' own adapter (vibe_rl's harness)
        from vibe_rl.ppo_jax_scan import make_env

        spec = make_env(env_id)
        env, env_params = spec.env, spec.params
    else:
        env, env_params = gymnax.make(env_id)
    action_space = env.action_space(env_params)
    if isinstance(action_space, gymnax.environments.spaces.Discrete):

        def sample_actions(key: jax.Array) -> jax.Array:  # one RNG call for all envs
            return jax.random.randint(key, (num_envs,), 0, action_space.n)
    else:

        def sample_actions(key: jax.Array) -> jax.Array:
            shape = (num_envs, *action_space.shape)
            return jax.random.uniform(key, shape, minval=action_space.low, maxval=action_space.high)

    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(key: jax.Array) -> jax.Array:
        key, reset_key = jax.random.split(key)
        _, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_envs), env_params
        )

        def step(carry, _):
            env_state, key = carry
            key, action_key, step_key = jax.random.split(key, 3)
            actions = sample_actions(action_key)
            _, env_state, reward, _, _, _ = step_envs(
                jax.random.split(step_key, num_envs), env_state, actions, env_params
            )
            return (env_state, key), reward.sum()

        _, rewards = jax.lax.scan(step, (env_state, key), None, num_steps)
        return jnp.sum(rewards)

    return jax.jit(rollout)


def ceiling_sps(env_id: str, num_envs: int, num_steps: int = 20_000, repeats: int = 3) -> float:
    """Environment steps per second of random-action stepping, compile time excluded."""
    rollout = make_random_rollout(env_id, num_envs, num_steps)
    key = jax.random.PRNGKey(0)
    return num_envs * num_steps / best_time(lambda: rollout(key), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=20_000)
    args = parser.parse_args()
    sps = ceiling_sps(args.env_id, args.num_envs, args.num_steps)
    print(f"{args.env_id}, {args.num_envs} envs: {sps:,.0f} env steps/s (random actions, compiled scan)")


if __name__ == "__main__":
    main()
