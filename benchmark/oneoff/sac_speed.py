"""Speed of vibe_rl/sac_jax.py: environment steps/s and gradient updates/s.

One compiled iteration of `--steps` steps (the script's `iteration`, as the run harness calls
it) is timed twice from the same state: once while its steps only act (random actions before
learning_starts: env steps and replay-buffer writes) and once while they learn (the same plus
one critic step, the delayed actor/alpha steps and the Polyak update). Compile time is excluded
(best of `--repeats` calls after a warm-up call). The gymnax ceiling (random actions, no
buffer) is measured alongside.

    python -m benchmark.oneoff.sac_speed --env-id Pendulum-v1 --steps 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import jax
import jax.numpy as jnp

from benchmark.ceiling import best_time, ceiling_sps
from vibe_rl import sac_jax as sac


def measure(
    env_id: str,
    num_envs: int,
    steps: int,
    hidden_size: int,
    batch_size: int,
    num_seeds: int,
    repeats: int,
    critic_layer_norm: bool = False,
) -> dict[str, float]:
    args = sac.Flags(
        env_id=env_id,
        num_envs=num_envs,
        total_timesteps=2 * steps * num_envs,
        learning_starts=steps * num_envs,  # iteration 0 only acts, iteration 1 learns
        log_frequency=steps * num_envs,  # one iteration (the harness's logged unit) is the timed program
        hidden_size=hidden_size,
        batch_size=batch_size,
        buffer_size=max(2 * steps * num_envs, 1),
        critic_layer_norm=critic_layer_norm,
    )
    algo = sac.make_algorithm(args)
    keys = jax.random.split(jax.random.PRNGKey(0), num_seeds)
    one = num_seeds == 1  # one seed unbatched, as the harness runs it (a vmapped batch of one is slower)
    init = algo.init if one else jax.vmap(algo.init)
    iteration = algo.iteration if one else jax.vmap(algo.iteration, in_axes=(0, None))
    state = jax.jit(init)(keys[0] if one else keys)
    run_iteration = jax.jit(iteration)
    state, _ = run_iteration(state, jnp.int32(0))  # a filled buffer for the learning iteration
    act_s = best_time(lambda: run_iteration(state, jnp.int32(0)), repeats)
    learn_s = best_time(lambda: run_iteration(state, jnp.int32(1)), repeats)
    return {
        "acting_env_steps_per_s": num_seeds * steps * num_envs / act_s,
        "training_env_steps_per_s": num_seeds * steps * num_envs / learn_s,
        "gradient_updates_per_s": num_seeds * steps / learn_s,
        "ms_per_gradient_update": 1000 * learn_s / (num_seeds * steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="Pendulum-v1")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2000, help="steps (of all envs) of the timed iteration")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--critic-layer-norm", action="store_true", help="the script's --critic-layer-norm")
    options = parser.parse_args()
    result = {
        "env_id": options.env_id,
        "num_envs": options.num_envs,
        "hidden_size": options.hidden_size,
        "batch_size": options.batch_size,
        "num_seeds": options.num_seeds,
        "critic_layer_norm": options.critic_layer_norm,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        **measure(
            options.env_id,
            options.num_envs,
            options.steps,
            options.hidden_size,
            options.batch_size,
            options.num_seeds,
            options.repeats,
            options.critic_layer_norm,
        ),
        "ceiling_env_steps_per_s": ceiling_sps(options.env_id, options.num_envs, repeats=options.repeats),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
