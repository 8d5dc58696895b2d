"""The harness's `step_envs` is gymnax's `env.step` for N envs with the episode starts drawn
ahead (`draw_episode_starts`): from the same keys and actions it must give what env.step
gives. The harness is the same text in every script (test_contract.py), so one script's
copy is tested."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _helpers import load_script


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "DeepSea-bsuite"])
def test_step_envs_gives_what_gymnax_env_step_gives(env_id):
    module = load_script("ppo_jax_scan")
    spec = module.make_env(env_id)
    env, params = spec.env, spec.params
    num_steps, num_envs = 250, 3  # Pendulum's time limit is 200 steps: truncations happen
    reset_key, action_key, step_key = jax.random.split(jax.random.PRNGKey(0), 3)
    space = env.action_space(params)
    actions = jax.vmap(jax.vmap(space.sample))(jax.random.split(action_key, (num_steps, num_envs)))
    _, start = module.reset_envs(spec, reset_key, num_envs)
    starts = module.draw_episode_starts(spec, step_key, (num_steps, num_envs))  # [T, N, ...]

    def gymnax(state, step):
        action, keys = step
        obs, next_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params
        )
        final_obs = info["final_observation"]
        return next_state, (state, module.EnvStep(obs, next_state, reward, terminated, truncated, final_obs))

    keys = jax.random.split(step_key, (num_steps, num_envs))  # the keys draw_episode_starts splits
    _, (states, theirs) = jax.jit(lambda xs: jax.lax.scan(gymnax, start, xs))((actions, keys))
    # ours, step by step from the same states: rounding cannot build up over the episode
    step = lambda state, action, starts: module.step_envs(spec, state, action, starts)
    ours = jax.jit(jax.vmap(step))(states, actions, starts)

    assert bool((theirs.terminated | theirs.truncated).any()), "no episode ended: the reset is untested"
    for our_leaf, their_leaf in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(
            np.asarray(our_leaf, float), np.asarray(their_leaf, float), rtol=1e-6, atol=1e-6
        )
