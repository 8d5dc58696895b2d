"""The random policy's return: uniform random actions, episodes run to their end in one jitted program.

    python -m benchmark.oneoff.random_policy CartPole-v1 Breakout-MinAtar brax/inverted_pendulum

prints, per env, the mean (and std, and the standard error) of the undiscounted return over
--episodes episodes (256 by default), each run from a fresh reset until it terminates or hits
the env's time limit, the same time limit as the scripts' evaluation. Actions: a uniform
integer in [0, K) for K discrete actions, a uniform vector in [low, high] of a Box. The env is
the scripts' own (make_env of vibe_rl/ppo_jax_scan.py: gymnax ids and brax/<name>). The means
are suite.toml's [random] table, the zero of the normalised scores.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import vibe_rl.ppo_jax_scan as harness


def random_returns(spec: Any, num_episodes: int, key: jax.Array) -> jax.Array:
    """The returns [num_episodes] of uniform random actions, each episode played to its end."""
    reset_key, key = jax.random.split(key)
    _, state = harness.reset_envs(spec, reset_key, num_episodes)

    def random_actions(key: jax.Array) -> jax.Array:
        if spec.discrete:
            return jax.random.randint(key, (num_episodes,), 0, spec.action_dim)
        low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
        return jax.random.uniform(key, (num_episodes, spec.action_dim), minval=low, maxval=high)

    def running(carry: tuple) -> jax.Array:
        t, _, _, alive, _ = carry
        return (t < spec.params.max_steps_in_episode) & alive.any()

    def step(carry: tuple) -> tuple:
        t, state, returns, alive, key = carry
        key, action_key, step_key = jax.random.split(key, 3)
        keys = jax.random.split(step_key, num_episodes)
        out = harness.step_envs(spec, keys, state, random_actions(action_key))
        returns = returns + jnp.where(alive, out.reward, 0.0)
        return t + 1, out.state, returns, alive & ~(out.terminated | out.truncated), key

    alive = jnp.ones(num_episodes, bool)
    carry = (0, state, jnp.zeros(num_episodes), alive, key)
    return jax.lax.while_loop(running, step, carry)[2]


def measure(env_id: str, num_episodes: int, seed: int = 0) -> dict[str, Any]:
    """The random policy's return on env_id: mean, std, standard error, episodes, seconds."""
    spec = harness.make_env(env_id)
    start = time.perf_counter()
    play = jax.jit(functools.partial(random_returns, spec, num_episodes))
    returns = np.asarray(play(jax.random.PRNGKey(seed)))
    seconds = time.perf_counter() - start
    return {
        "env": env_id,
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "sem": float(returns.std(ddof=1) / np.sqrt(len(returns))),
        "episodes": len(returns),
        "seconds": seconds,  # compile included
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="+", help="gymnax ids or brax/<name>")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for env_id in args.env_ids:
        r = measure(env_id, args.episodes, args.seed)
        print(
            f'"{env_id}" = {r["mean"]:.4g}   # std {r["std"]:.3g}, s.e. {r["sem"]:.2g}, '
            f"{r['episodes']} episodes ({r['seconds']:.1f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
