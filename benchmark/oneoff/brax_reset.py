"""What the fresh reset at every step costs on a Brax task.

The scripts step Brax's envs through gymnax's `env.step` (the harness's `step_envs`): every step
also computes a fresh reset, and keeps it where the episode ended, so every episode starts from
a new random state. Brax's own AutoResetWrapper instead restarts from one cached first state.
This times both halves side by side, random actions, in one compiled `lax.scan` each:

- `with reset`: `step_envs`, i.e. gymnax's step with its auto-reset (what training runs);
- `step only`: the raw env's `step_env` with no reset at all (the cost of the physics alone).

    python -m benchmark.oneoff.brax_reset --env brax/hopper --num-envs 64
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository
from benchmark.ceiling import best_time  # noqa: E402
from vibe_rl import sac_jax as harness  # noqa: E402  (any script: the harness is the same in each)


def make_rollouts(env_id: str, num_envs: int, num_steps: int) -> dict[str, Any]:
    """Two jitted functions key -> summed reward of num_steps x num_envs random-action steps."""
    spec = harness.make_env(env_id)

    def rollout(key: jax.Array, with_reset: bool) -> jax.Array:
        key, reset_key = jax.random.split(key)
        _, env_state = harness.reset_envs(spec, reset_key, num_envs)

        def step(carry: tuple, _: None) -> tuple:
            env_state, key = carry
            key, action_key, step_key = jax.random.split(key, 3)
            actions = jax.random.uniform(action_key, (num_envs, spec.action_dim), minval=-1.0, maxval=1.0)
            keys = jax.random.split(step_key, num_envs)
            if with_reset:
                out = harness.step_envs(spec, keys, env_state, actions)
                return (out.state, key), out.reward.sum()
            step_env = jax.vmap(spec.env.step_env, in_axes=(0, 0, 0, None))
            _, env_state, reward, _, _ = step_env(keys, env_state, actions, spec.params)
            return (env_state, key), reward.sum()

        _, rewards = jax.lax.scan(step, (env_state, key), None, num_steps)
        return jnp.sum(rewards)

    return {
        name: jax.jit(lambda k, r=r: rollout(k, r))
        for name, r in (("with reset", True), ("step only", False))
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="brax/hopper")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each is kept")
    args = parser.parse_args(argv)
    rollouts, key = make_rollouts(args.env, args.num_envs, args.num_steps), jax.random.PRNGKey(0)
    best = dict.fromkeys(rollouts, float("inf"))
    for _ in range(args.rounds):
        for name, rollout in rollouts.items():
            best[name] = min(best[name], best_time(lambda r=rollout: r(key), repeats=1))
    sps = {name: args.num_envs * args.num_steps / seconds for name, seconds in best.items()}
    for name, value in sps.items():
        print(f"{args.env}, {args.num_envs} envs, {name}: {value:,.0f} env steps/s")
    cost = best["with reset"] / best["step only"] - 1
    print(f"the fresh reset at every step costs {cost:+.1%} of the step time")
    return sps


if __name__ == "__main__":
    main()
