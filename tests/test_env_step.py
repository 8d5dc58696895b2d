"""The rollouts of ppo_jax_scan, ppo_multigpu and pqn_jax step their envs with `env_step`:
gymnax's `env.step` with the episode starts drawn ahead for the whole rollout
(`draw_env_noise`). From the same keys and actions it must give what env.step gives, and
the three copies of it must stay one text."""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import load_script

SCRIPTS = ("ppo_jax_scan", "ppo_multigpu", "pqn_jax")
CASES = [
    (script, env_id)
    for script in SCRIPTS
    for env_id in ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "DeepSea-bsuite")
    if not (script == "pqn_jax" and env_id == "Pendulum-v1")  # PQN needs discrete actions
]


@pytest.mark.parametrize(("script", "env_id"), CASES)
def test_env_step_gives_what_gymnax_env_step_gives(script, env_id):
    module = load_script(script)
    spec = module.make_env(env_id)
    env, params = spec.env, spec.env_params
    num_steps, num_envs = 250, 3  # Pendulum's time limit is 200 steps: truncations happen
    key, reset_key, action_key, step_key = jax.random.split(jax.random.PRNGKey(0), 4)
    space = env.action_space(params)
    actions = jax.vmap(jax.vmap(space.sample))(jax.random.split(action_key, (num_steps, num_envs)))
    _, start = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), params)
    noise = module.draw_env_noise(spec, step_key, (num_steps, num_envs))  # [T, N, ...]

    def gymnax(state, step):
        action, keys = step
        obs, next_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params
        )
        return next_state, (
            state,
            module.EnvStep(obs, next_state, reward, terminated, truncated, info["final_observation"]),
        )

    keys = jax.random.split(step_key, (num_steps, num_envs))  # the keys draw_env_noise splits
    _, (states, theirs) = jax.jit(lambda xs: jax.lax.scan(gymnax, start, xs))((actions, keys))
    # ours, step by step from the same states: rounding cannot build up over the episode
    ours = jax.jit(jax.vmap(jax.vmap(functools.partial(module.env_step, spec))))(states, actions, noise)

    assert bool(jnp.any(theirs.terminated | theirs.truncated)), "no episode ended: the reset is untested"
    for our_leaf, their_leaf in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(
            np.asarray(our_leaf, float), np.asarray(their_leaf, float), rtol=1e-6, atol=1e-6
        )


def test_the_three_rollout_scripts_share_one_env_step_text():
    # Each script is self-contained (one file to copy), so the env step is written in all
    # three; this keeps the copies from drifting apart, as the harness test does for the harness.
    names = ("EnvNoise", "EnvStep", "draw_env_noise", "env_step")
    texts = {
        script: [inspect.getsource(getattr(load_script(script), n)) for n in names] for script in SCRIPTS
    }
    first = texts[SCRIPTS[0]]
    assert all(text == first for text in texts.values()), [s for s, t in texts.items() if t != first]
