"""The environments every script sees, through the harness's make_env / reset_envs / step_envs:
gymnax's contract (terminated, truncated, the final observation before the auto-reset) for
gymnax ids, and for Brax's MuJoCo tasks (`brax/<name>`) behind the same API. The harness is
the same text in every script (test_contract.py), so one script's copy is tested."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import load_script, tree_equal

h = load_script("ppo_jax_scan")


def rollout(spec, actions_of_obs, num_steps: int, num_envs: int = 2, seed: int = 0):
    """num_steps steps of num_envs envs with the policy actions_of_obs, the reset included in the one
    compiled program (a Brax reset run op by op costs seconds): (the EnvSteps [T, N, ...], the first obs)."""

    def run(reset_key, step_keys):
        obs, state = h.reset_envs(spec, reset_key, num_envs)

        def body(carry, key):
            obs, state = carry
            step = h.step_envs(spec, jax.random.split(key, num_envs), state, actions_of_obs(obs))
            return (step.obs, step.state), step

        return jax.lax.scan(body, (obs, state), step_keys)[1], obs

    keys = jax.random.split(jax.random.PRNGKey(seed + 1), num_steps)
    return jax.jit(run)(jax.random.PRNGKey(seed), keys)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "DeepSea-bsuite"])
def test_step_envs_is_gymnax_env_step(env_id):
    spec = h.make_env(env_id)
    obs, state = h.reset_envs(spec, jax.random.PRNGKey(0), 3)
    keys, action = jax.random.split(jax.random.PRNGKey(1), 3), jnp.zeros(3, jnp.int32)
    ours = h.step_envs(spec, keys, state, action)
    theirs = jax.vmap(spec.env.step, in_axes=(0, 0, 0, None))(keys, state, action, spec.params)
    for a, b in zip(
        jax.tree.leaves(ours), jax.tree.leaves((*theirs[:5], theirs[5]["final_observation"])), strict=True
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # 40 s: a Brax program compiled; the truncation test below stays in the default run
def test_brax_hopper_falls_over_as_a_termination_with_its_final_observation():
    """Zero torques: the hopper falls and is unhealthy, a termination (not a truncation). The
    final observation is the fallen hopper's, the next one a fresh start."""
    spec = h.make_env("brax/hopper")
    assert spec.params.max_steps_in_episode == 1000 and spec.action_dim == 3 and not spec.discrete
    steps, _ = rollout(spec, lambda obs: jnp.zeros((obs.shape[0], 3)), 200)
    terminated, truncated = np.asarray(steps.terminated), np.asarray(steps.truncated)
    assert terminated[:, 0].any() and not truncated.any()
    t = int(terminated[:, 0].argmax())
    final, after = np.asarray(steps.final_obs[t, 0]), np.asarray(steps.obs[t, 0])
    assert final[0] < 0.7 or abs(final[1]) > 0.2  # unhealthy: the torso's height or angle
    assert abs(after[0] - 1.25) < 0.01 and abs(after[1]) < 0.01  # a fresh start, upright
    np.testing.assert_array_equal(steps.final_obs[t - 1, 0], steps.obs[t - 1, 0])  # no reset before


@pytest.fixture(scope="module")
def pendulums():
    """1001 steps of two Brax inverted pendulums, one compiled program: env 0 balanced by a PD controller,
    env 1 given no force (it falls, again and again). The EnvSteps [1001, 2, ...]."""

    def balance_the_first(obs):  # [2, 4] -> [2, 1]
        balance = jnp.clip(10 * obs[:, 1:2] + obs[:, 3:4] + 0.5 * obs[:, 0:1] + 0.5 * obs[:, 2:3], -1, 1)
        return balance.at[1].set(0.0)

    return rollout(h.make_env("brax/inverted_pendulum"), balance_the_first, 1001)[0]


def test_brax_time_limit_is_a_truncation_with_its_final_observation(pendulums):
    """The balanced pendulum runs into the 1000-step limit: truncated, not terminated; the final
    observation is the balanced pendulum's; then a fresh episode."""
    steps = pendulums
    truncated, terminated = np.asarray(steps.truncated), np.asarray(steps.terminated)
    assert not terminated[:, 0].any()
    np.testing.assert_array_equal(np.nonzero(truncated[:, 0])[0], [999])  # the 1000th step
    assert not np.allclose(steps.final_obs[999, 0], steps.obs[999, 0])  # reached vs the new start
    np.testing.assert_allclose(
        steps.final_obs[999, 0, :2], steps.final_obs[998, 0, :2], atol=0.05
    )  # balanced
    assert int(steps.state.time[999, 0]) == 0 and int(steps.state.time[1000, 0]) == 1


@pytest.mark.slow  # 40 s: a Brax hopper compiled; the time limit test above stays in the default run
def test_a_truncated_hopper_is_bootstrapped_and_a_fallen_one_is_not():
    """PPO's GAE (lambda 0: advantage = TD error) on hopper steps: at a time-limit end (a 30-step
    limit: the hopper is still healthy) it adds gamma * V(the true final observation); at an
    unhealthy end (the default limit: it falls at about step 120) nothing. A wrapper that folded
    the time limit into termination, or kept the reset observation, fails this."""
    gamma, value = 0.9, lambda obs: 1.0 + obs.sum(-1)  # any function of the observation
    for limit, end in ((30, "truncated"), (1000, "terminated")):
        spec = h.make_env("brax/hopper")
        spec = spec._replace(params=spec.params.replace(max_steps_in_episode=limit))
        steps, first_obs = rollout(spec, lambda obs: jnp.zeros((obs.shape[0], 3)), 200)
        obs = jnp.concatenate([first_obs[None], steps.obs[:-1]])  # [T, N, obs]: what each step saw
        advantages, _ = h.compute_gae(steps.reward, value(obs), steps.terminated, steps.truncated,
                                      value(steps.final_obs), value(steps.obs[-1]), gamma, 0.0)  # fmt: skip
        ended = np.asarray(getattr(steps, end)[:, 0])
        assert (
            ended.any() and not np.asarray(steps.terminated if end == "truncated" else steps.truncated).any()
        )
        t = int(ended.argmax())
        bootstrap = gamma * value(steps.final_obs[t, 0]) if end == "truncated" else 0.0
        expected = steps.reward[t, 0] + bootstrap - value(obs[t, 0])
        np.testing.assert_allclose(advantages[t, 0], expected, rtol=1e-5)


def test_brax_episodes_start_fresh_at_every_reset(pendulums):
    """Each reset draws its own start (Brax's AutoResetWrapper replays one cached start): the pendulum
    given no force falls over and over."""
    steps = pendulums
    done = np.asarray(steps.terminated[:, 1] | steps.truncated[:, 1])
    starts = np.asarray(steps.obs[:, 1])[done]  # the first observation of each new episode
    assert len(starts) >= 3
    assert len({tuple(np.round(s, 6)) for s in starts}) == len(starts)


def test_unknown_brax_task_and_missing_brax_are_refused_in_one_line(monkeypatch):
    with pytest.raises(
        h.ArgsError, match=r"--env-id brax/nope is not a Brax environment; valid: .*brax/hopper"
    ):
        h.make_env("brax/nope")
    monkeypatch.setitem(sys.modules, "brax", None)  # import brax fails as if it were not installed
    with pytest.raises(h.ArgsError, match=r"Brax is not installed: pip install"):
        h.make_env("brax/hopper")


@pytest.mark.slow  # 16 s; a resume is bitwise for every script in test_contract.py, on gymnax
def test_a_sac_run_on_brax_stopped_after_a_chunk_and_resumed_ends_bitwise_the_same(tmp_path):
    """SAC on brax/inverted_pendulum (--normalize-obs), 3 chunks as the CLI compiles them: stopped
    after the first, its checkpoint written and read back by the harness, and continued, it ends
    with bitwise the state of the run never stopped. The state holds Brax's physics states, the
    replay buffer, the observation statistics, the parameters and the optimisers."""
    sac = load_script("sac_jax")
    args = sac.Flags(env_id="brax/inverted_pendulum", normalize_obs=True, total_timesteps=300,
                    learning_starts=100, batch_size=16, hidden_size=16, log_frequency=50)  # fmt: skip
    algo = sac.make_algorithm(args)  # 6 iterations of 50 steps, gradient steps from step 100 on
    per_chunk, num_chunks = sac.plan_chunks(algo.num_iterations, 3)
    chunk = jax.jit(lambda state, first: sac.run_chunk(algo, per_chunk, state, first))

    def run(state, chunks):  # the given chunks of the plan, one after another
        for c in chunks:
            state, _ = chunk(state, jnp.int32(c * per_chunk))
        return state

    init = jax.jit(algo.init)
    uninterrupted = run(init(jax.random.PRNGKey(1)), range(num_chunks))

    stopped = run(init(jax.random.PRNGKey(1)), range(1))
    sac.save_checkpoint(tmp_path, per_chunk, per_chunk * algo.env_steps_per_iteration, stopped)
    (path,) = (tmp_path / "checkpoints").glob("step_*.msgpack")
    done, restored = sac.read_checkpoint(path, jax.eval_shape(algo.init, jax.random.PRNGKey(0)))
    assert done == per_chunk and tree_equal(restored, stopped)
    resumed = run(restored, range(1, num_chunks))

    assert float(stopped.buffer.data.terminated.sum()) > 3  # the pendulum fell: episodes ended
    assert not tree_equal(stopped.learner.params.actor, resumed.learner.params.actor)  # it learned since
    assert tree_equal(resumed, uninterrupted)
