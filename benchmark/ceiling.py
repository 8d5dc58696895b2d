"""The speed ceiling: raw gymnax throughput with random actions in one compiled scan.

A training script can never step its environments faster than this, at the same number
of parallel envs on the same machine; the benchmarks report training steps/s as a
fraction of it.

    python -m benchmark.ceiling --env-id CartPole-v1 --num-envs 4

A Craftax id without --resets steps Craftax's own env (NoAutoReset), never reset: any of its four
envs, the pixel ones too (docs/harness.md, Craftax's pixel observations).

    python -m benchmark.ceiling --env-id craftax/Craftax-Pixels-v1 --num-envs 256 --num-steps 200

For an env whose reset costs far more than a step (Craftax generates a world; DM Control's CheetahRun
settles its model for 200 physics steps), --resets compares how the episodes restart, each as steps/s
and as a share of stepping with no reset at all:
- none: the envs step on, never reset (the ceiling; an ended episode keeps stepping);
- pool: the harness's for Craftax (step_from_pool): fresh starts generated ahead, N/8 every 16 steps;
- ended: the harness's for Playground (step_resetting_ended): the ended envs reset in one batch, at the
  steps where one ended;
- optimistic: Craftax_Baselines' scheme, N/16 new starts a step shared out among the envs that
  ended, a start duplicated when more end at once (re-implemented here for the comparison);
- every (with --every: it is 20-60x slower on Craftax): gymnax's auto-reset, a new start computed for
  every env at every step.
It also counts, per 1,000 episodes, those that began from a start another episode had (the pool's
dry starts, the optimistic reset's duplicates).

    python -m benchmark.ceiling --env-id craftax/Craftax-Classic-Symbolic-v1 --num-envs 256 --resets
    python -m benchmark.ceiling --env-id playground/CheetahRun --num-envs 64 --resets --num-steps 1000 \
        --schemes none ended
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
    """A jitted function key -> the summed rewards and observations of num_steps x num_envs random steps."""
    if env_id.startswith("playground/"):  # gymnax's step would reset every env every step
        raise SystemExit(f"{env_id}: use --resets, which steps it as the scripts do (and with no reset)")
    if env_id.startswith("craftax/"):  # Craftax's own env, any of its four (pixels too), never reset
        from craftax.craftax_env import make_craftax_env_from_name

        env = make_craftax_env_from_name(env_id.removeprefix("craftax/"), auto_reset=False)
        env_params = env.default_params
    elif env_id.startswith("brax/"):  # the scripts' own adapter (vibe_rl's harness)
        from vibe_rl.ppo_jax_scan import make_env

        spec = make_env(env_id)
        env, env_params = spec.env, spec.params
    else:
        env, env_params = gymnax.make(env_id)
    action_space = env.action_space(env_params)
    if hasattr(action_space, "n"):  # discrete: gymnax's Discrete, or Craftax's own

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
            obs, env_state, reward, *_ = step_envs(
                jax.random.split(step_key, num_envs), env_state, actions, env_params
            )  # gymnax 1.0 returns 6 values, Craftax's env 5
            return (env_state, key), reward.sum() + obs.sum()  # obs used: XLA would drop an unused render

        _, rewards = jax.lax.scan(step, (env_state, key), None, num_steps)
        return jnp.sum(rewards)

    return jax.jit(rollout)


def ceiling_sps(env_id: str, num_envs: int, num_steps: int = 20_000, repeats: int = 3) -> float:
    """Environment steps per second of random-action stepping, compile time excluded."""
    rollout = make_random_rollout(env_id, num_envs, num_steps)
    key = jax.random.PRNGKey(0)
    return num_envs * num_steps / best_time(lambda: rollout(key), repeats)


def reset_schemes(
    env_id: str, num_envs: int, num_steps: int, repeats: int, every: bool, only: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """For each way of restarting episodes: steps/s of random actions, episodes ended, starts reused."""
    from vibe_rl import ppo_jax_scan as h  # the harness's adapters, its pool and its reset of the ended

    spec = h.make_env(env_id)
    env, params = spec.env, spec.params
    step_env = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
    truncated = jax.vmap(env.is_truncated, in_axes=(0, None))
    optimistic_starts = max(1, num_envs // 16)

    def none(state, keys, actions):  # env states [N] -> (states, ended [N], reused [N])
        _, stepped, _, terminated, _ = step_env(keys, state, actions, params)
        done = terminated | truncated(stepped, params)
        return stepped, done, jnp.zeros_like(done)

    def harness(step: Callable) -> Callable:  # a harness step on the state its reset gives
        def scheme(state, keys, actions):
            out = step(spec, keys, state, actions)
            reused = (
                out.state.dry_starts > state.dry_starts if isinstance(state, h.Pooled) else 0 * keys[:, 0]
            )
            return out.state, out.terminated | out.truncated, reused

        return scheme

    def every_step(state, keys, actions):
        step = h.reset_every_step(spec, keys, state, actions)
        return step.state, step.terminated | step.truncated, jnp.zeros(num_envs, bool)

    def optimistic(state, keys, actions):
        _, stepped, _, terminated, _ = step_env(keys, state, actions, params)
        done = terminated | truncated(stepped, params)
        _, starts = h.reset_each(spec, keys[0], optimistic_starts)  # [R]
        rank = jnp.cumsum(done) - 1  # an ended env takes start rank % R: duplicated past R
        new = jax.tree.map(lambda x: x[rank % optimistic_starts], starts)
        select = lambda a, b: jnp.where(done.reshape(-1, *[1] * (a.ndim - 1)), a, b)
        return jax.tree.map(select, new, stepped), done, done & (rank >= optimistic_starts)

    schemes = {  # name: (the scheme, the reset its state starts from)
        "none": (none, h.reset_each),
        "pool": (harness(h.step_from_pool), h.reset_pool),
        "ended": (harness(h.step_resetting_ended), h.reset_each),
        "optimistic": (optimistic, h.reset_each),
    } | ({"every": (every_step, h.reset_each)} if every else {})
    rows = []
    for name, (scheme, reset) in schemes.items():
        if only and name not in only:
            continue

        def rollout(key: jax.Array, scheme=scheme, reset=reset) -> tuple[jax.Array, jax.Array]:
            _, state = reset(spec, key, num_envs)

            def step(carry, key):
                state, ended, reused = carry
                action_key, step_key = jax.random.split(key)
                state, done, again = scheme(state, jax.random.split(step_key, num_envs), actions(action_key))
                return (state, ended + done.sum(), reused + again.sum()), None

            zero = jnp.int32(0)
            return jax.lax.scan(step, (state, zero, zero), jax.random.split(key, num_steps))[0][1:]

        def actions(key: jax.Array) -> jax.Array:  # [N] or [N, A]: uniform over the action space
            if spec.discrete:
                return jax.random.randint(key, (num_envs,), 0, spec.action_dim)
            return jax.random.uniform(key, (num_envs, spec.action_dim), minval=spec.action_low,
                                      maxval=spec.action_high)  # fmt: skip

        program, key = jax.jit(rollout), jax.random.PRNGKey(0)
        seconds = best_time(lambda program=program, key=key: program(key), repeats)
        ended, reused = (int(x) for x in program(key))
        rows.append(
            {"scheme": name, "sps": num_envs * num_steps / seconds, "episodes": ended, "reused": reused}
        )
        print_row(env_id, num_envs, rows)
    return rows


def print_row(env_id: str, num_envs: int, rows: list[dict[str, Any]]) -> None:  # the last row, as measured
    row = rows[-1]
    share, per_1000 = row["sps"] / rows[0]["sps"], 1000 * row["reused"] / max(row["episodes"], 1)
    reused = f"{per_1000:.0f} per 1,000 episodes began from a used start" if row["scheme"] != "none" else ""
    where = f"{env_id}, {num_envs} envs, {row['scheme']:>10}"
    print(f"{where}: {row['sps']:>10,.0f} env steps/s ({share:.0%} of {rows[0]['scheme']}); "
          f"{row['episodes']:,} episodes ended; {reused}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=20_000)
    parser.add_argument(
        "--resets", action="store_true", help="compare the ways episodes restart (Craftax, Playground)"
    )
    parser.add_argument(
        "--every", action="store_true", help="with --resets: gymnax's reset at every step too"
    )
    parser.add_argument(
        "--schemes", nargs="+", default=(), help="with --resets: only these (none first, the baseline)"
    )
    args = parser.parse_args()
    if args.resets:
        reset_schemes(args.env_id, args.num_envs, args.num_steps, 3, args.every, tuple(args.schemes))
        return
    sps = ceiling_sps(args.env_id, args.num_envs, args.num_steps)
    print(f"{args.env_id}, {args.num_envs} envs: {sps:,.0f} env steps/s (random actions, compiled scan)")


if __name__ == "__main__":
    main()
