"""Tests of vibe_rl/ppo_rnn_jax.py: the four places where recurrent PPO goes wrong (the hidden
state's reset, the update's re-run from the stored initial state, minibatches of whole env
sequences, the bootstrap at a time limit), the math, shapes under jit and vmap, the memory
environments' setup, a smoke run, and learning. What every script guarantees on the command line
is in test_contract.py."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vibe_rl import ppo_jax_scan as ppo, ppo_rnn_jax as rnn

TINY = dict(num_envs=4, num_steps=8, total_timesteps=96, num_minibatches=2, update_epochs=2, hidden_size=8)


def tiny(**overrides) -> rnn.Setup:
    """A small Setup; its budget is at least one batch, so only a rollout's flags need giving."""
    args = {**TINY, **overrides}
    args["total_timesteps"] = max(args["total_timesteps"], args["num_envs"] * args["num_steps"])
    return rnn.build_setup(rnn.Flags(**args))


def transitions(setup: rnn.Setup, state: rnn.RunnerState) -> tuple[rnn.RunnerState, rnn.Transition]:
    return jax.jit(lambda s: rnn.rollout(setup, s))(state)


# --- [RNN-1] the hidden state's reset ------------------------------------------------------


def test_hidden_state_resets_exactly_at_episode_starts():
    """A hand-built pattern of episode starts: from a start on, the core's outputs do not depend
    on the hidden state it was given (reset to zeros); before its first start, an env's do."""
    setup = tiny(hidden_size=6)
    params = rnn.init_params(setup, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 3, 4))  # [T, N, obs_dim]
    starts = jnp.array(  # [T, N]. env 0: starts at t=0 and t=3; env 1: at t=2; env 2: never
        [[1, 0, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]], bool
    )
    runs = [
        rnn.unroll(setup, params, h0, obs, starts)
        for h0 in (jnp.zeros((3, 6)), jax.random.normal(jax.random.PRNGKey(2), (3, 6)))
    ]
    (hidden_a, out_a, value_a), (hidden_b, out_b, value_b) = runs
    same = np.all(np.isclose(hidden_a, hidden_b, atol=1e-6), axis=-1)  # [T, N]
    first_start = {0: 0, 1: 2}
    for env in range(3):
        for t in range(5):
            expected = env in first_start and t >= first_start[env]
            assert bool(same[t, env]) == expected, (t, env)
    np.testing.assert_allclose(value_a[:, 0], value_b[:, 0], atol=1e-6)
    # at t=3, env 0's second episode starts: the same as a fresh core reading obs[3] alone
    fresh = rnn.agent_step(setup, params, jnp.ones((1, 6)), obs[3, :1], jnp.ones(1, bool))[0]
    np.testing.assert_allclose(hidden_a[3, 0], fresh[0], atol=1e-6)
    assert not np.allclose(hidden_a[4, 0], fresh[0])  # and carries its memory on after


def test_gru_is_flax_gru_cell_stepped_with_resets():
    """The fused GRU against flax's GRUCell (the same parameters, split per gate) stepped one step
    at a time with the reset [RNN-1]: the same hidden states; and its initialisation is GRUCell's
    (orthogonal [H, H] blocks, one per gate, a lecun-normal input kernel, zero biases)."""
    H, D, T, N = 5, 3, 6, 2
    x = jax.random.normal(jax.random.PRNGKey(0), (T, N, D))
    starts = jnp.array([[1, 0], [0, 0], [0, 1], [1, 0], [0, 0], [0, 0]], bool)  # [T, N]
    h0 = jax.random.normal(jax.random.PRNGKey(1), (N, H))
    gru = rnn.GRU(H)
    params = gru.init(jax.random.PRNGKey(2), h0, x, starts)["params"]
    hiddens = gru.apply({"params": params}, h0, x, starts)  # [T, N, H]

    kernel_x, bias_x = params["Dense_0"]["kernel"], params["Dense_0"]["bias"]  # [D, 3H], [3H]
    gate = lambda a, i: a[..., i * H : (i + 1) * H]  # gate i's block of a [..., 3H] array
    cell = {}  # GRUCell's parameters: ir, iz, in (kernel, bias) and hr, hz, hn (kernel; hn's bias)
    for i, g in enumerate(("r", "z", "n")):
        cell[f"i{g}"] = {"kernel": gate(kernel_x, i), "bias": gate(bias_x, i)}
        cell[f"h{g}"] = {"kernel": gate(params["hidden_kernel"], i)}
    cell["hn"]["bias"] = params["candidate_bias"]
    h, expected = h0, []
    for t in range(T):
        h = jnp.where(starts[t, :, None], 0.0, h)
        h, _ = nn.GRUCell(H).apply({"params": cell}, h, x[t])
        expected.append(h)
    np.testing.assert_allclose(hiddens, jnp.stack(expected), atol=1e-5)

    reference = nn.GRUCell(H).init(jax.random.PRNGKey(3), h0, x[0])["params"]  # same shapes per gate
    assert jax.tree.map(jnp.shape, cell) == jax.tree.map(jnp.shape, reference)
    for i in range(3):  # each gate's recurrent block is orthogonal, as GRUCell's
        block = np.asarray(gate(params["hidden_kernel"], i))
        np.testing.assert_allclose(block.T @ block, np.eye(H), atol=1e-5)
    assert not np.any(bias_x) and not np.any(params["candidate_bias"])


def test_rollout_marks_the_step_after_an_episode_end_as_a_start():
    setup = tiny(num_steps=64, num_envs=2)
    state = rnn.init_state(setup, jax.random.PRNGKey(0))
    _, traj = transitions(setup, state)
    done = np.asarray(traj.terminated | traj.truncated)  # [T, N]
    assert done.any(), "a random CartPole policy ends episodes within 64 steps"
    np.testing.assert_array_equal(traj.episode_start[1:], done[:-1])
    assert bool(traj.episode_start[0].all())  # every env begins at an episode's start


# --- [RNN-2] the update re-runs the core from the stored initial state -------------------------


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_rollout_log_probs_and_values_equal_the_updates_recomputation(env_id):
    """The second rollout (its initial hidden state is not zero, episodes end inside it): unrolled
    from the stored initial state with the stored resets, the core gives the rollout's log-probs
    and values to float tolerance, and the first minibatch's ratio is 1 (no KL, nothing clipped).
    From zeros instead of the stored state, it does not."""
    setup = tiny(env_id=env_id, num_steps=40)
    state, _ = transitions(setup, rnn.init_state(setup, jax.random.PRNGKey(3)))
    stored = state.hidden
    assert np.abs(stored).max() > 1e-3
    _, traj = transitions(setup, state)
    _, out, values = rnn.unroll(setup, state.params, stored, traj.obs, traj.episode_start)
    log_probs = rnn.policy_of(setup.spec, state.params, out).log_prob(traj.action)
    np.testing.assert_allclose(log_probs, traj.log_prob, atol=1e-5)
    np.testing.assert_allclose(values, traj.value, atol=1e-5)

    env_major = lambda x: jnp.swapaxes(x, 0, 1)
    fields = (traj.obs, traj.episode_start, traj.action, traj.log_prob, traj.value)
    advantage = jax.random.normal(jax.random.PRNGKey(4), traj.value.shape)
    batch = rnn.Batch(stored, *map(env_major, fields), env_major(advantage), env_major(traj.value))
    _, info = rnn.loss_fn(setup, state.params, batch)
    assert abs(float(info.approx_kl)) < 1e-6 and float(info.clipfrac) == 0.0

    _, _, from_zeros = rnn.unroll(setup, state.params, jnp.zeros_like(stored), traj.obs, traj.episode_start)
    assert not np.allclose(from_zeros[0], traj.value[0], atol=1e-4)


# --- [RNN-3] minibatches are whole env sequences --------------------------------------------


def test_minibatches_are_whole_env_sequences(monkeypatch):
    """sgd_epoch's minibatches, caught by a stand-in minibatch step: each holds N/M envs' whole
    [T] sequences with their own initial hidden states, and together they cover every env once."""
    setup = tiny(num_envs=8, num_minibatches=4, num_steps=5)
    n, t, h = 8, 5, setup.args.hidden_size
    env_of = jnp.broadcast_to(jnp.arange(n)[:, None], (n, t)).astype(jnp.float32)  # [N, T]: the env's id
    step_of = jnp.broadcast_to(jnp.arange(t)[None], (n, t)).astype(jnp.float32)  # [N, T]: the step
    batch = rnn.Batch(
        initial_hidden=jnp.broadcast_to(jnp.arange(n)[:, None], (n, h)).astype(jnp.float32),
        obs=jnp.stack([env_of, step_of], -1),
        episode_start=jnp.zeros((n, t), bool),
        action=env_of,
        log_prob=env_of,
        value=env_of,
        advantage=env_of,
        target=env_of,
    )
    monkeypatch.setattr(rnn, "minibatch_step", lambda setup, carry, minibatch: (carry, minibatch))
    params = rnn.init_params(setup, jax.random.PRNGKey(0))
    carry = rnn.EpochCarry(params, None, jnp.asarray(1.0), jax.random.PRNGKey(5), jnp.asarray(False))
    _, minibatches = rnn.sgd_epoch(setup, carry, batch)  # leaves [M, N/M, ...]
    assert minibatches.obs.shape == (4, 2, t, 2)
    envs = np.asarray(minibatches.initial_hidden[..., 0]).astype(int)  # [M, N/M]
    assert sorted(envs.ravel()) == list(range(n))
    assert not np.array_equal(envs.ravel(), np.arange(n))  # shuffled
    for field in (minibatches.obs[..., 0], minibatches.action, minibatches.advantage):
        np.testing.assert_array_equal(field, np.broadcast_to(envs[..., None], (4, 2, t)))
    np.testing.assert_array_equal(minibatches.obs[..., 1], np.broadcast_to(np.arange(t), (4, 2, t)))


def test_env_minibatches_is_a_partition_of_the_envs():
    for key in range(5):
        envs = np.asarray(rnn.env_minibatches(jax.random.PRNGKey(key), 12, 3))
        assert envs.shape == (3, 4) and sorted(envs.ravel()) == list(range(12))


def test_num_minibatches_must_divide_num_envs():
    with pytest.raises(rnn.ArgsError, match="--num-minibatches 3 must divide --num-envs 4"):
        tiny(num_minibatches=3)


# --- [RNN-4] time limits: GAE, and V(final_obs) with its hidden state ------------------------


def test_final_obs_value_continues_the_episodes_hidden_state():
    """V(final_obs[t]) as iteration computes it equals one more step of the unrolled core, from
    the hidden state after step t, without a reset: final_obs is read as part of the episode."""
    setup = tiny(num_steps=64, num_envs=2)
    state = rnn.init_state(setup, jax.random.PRNGKey(0))
    _, traj = transitions(setup, state)
    t, env = map(int, np.argwhere(np.asarray(traj.terminated))[0])
    h = jnp.zeros((1, setup.args.hidden_size))  # the episode from its start, step by step
    first = int(np.nonzero(np.asarray(traj.episode_start[: t + 1, env]))[0][-1])
    for s in range(first, t + 1):
        h = rnn.agent_step(setup, state.params, h, traj.obs[s, env][None], jnp.array([s == first]))[0]
    np.testing.assert_allclose(h[0], traj.hidden[t, env], atol=1e-5)
    expected = rnn.agent_step(setup, state.params, h, traj.final_obs[t, env][None], jnp.zeros(1, bool))[2]
    no_reset = jnp.zeros_like(traj.terminated)
    final_values = rnn.agent_step(setup, state.params, traj.hidden, traj.final_obs, no_reset)[2]
    np.testing.assert_allclose(final_values[t, env], expected[0], atol=1e-5)


# --- reward scaling --------------------------------------------------------------------------


def test_rms_update_gives_the_statistics_of_all_batches_seen():
    rms = rnn.RunningMeanStd(jnp.zeros(()), jnp.ones(()), jnp.asarray(1e-4))
    batches = [jax.random.normal(jax.random.PRNGKey(i), (50,)) * 3.0 + i for i in range(3)]
    for batch in batches:
        rms = rnn.rms_update(rms, batch)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, everything.mean(), rtol=1e-4)
    np.testing.assert_allclose(rms.var, everything.var(), rtol=1e-4)
    assert float(rms.count) == pytest.approx(150.0, abs=1e-3)


def test_normalize_reward_scales_the_learning_signal_not_the_reported_return():
    """CartPole pays 1 a step: scaled, the rollout's rewards are 1 / std of the discounted return
    (below 1 once that std passes 1); the episode returns it reports stay the env's own (= the lengths)."""
    setup = tiny(num_steps=64, num_envs=2, normalize_reward=True)
    state, traj = transitions(setup, rnn.init_state(setup, jax.random.PRNGKey(0)))
    assert float(state.return_rms.count) == pytest.approx(64 * 2, abs=1e-3)
    np.testing.assert_allclose(traj.reward[-1], 1.0 / np.sqrt(float(state.return_rms.var) + 1e-8), rtol=1e-5)
    assert (np.asarray(traj.reward[-8:]) < 1.0).all()
    np.testing.assert_array_equal(traj.episode_return, traj.episode_length)
    _, plain = transitions(tiny(num_steps=64, num_envs=2), rnn.init_state(setup, jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(plain.reward, 1.0)


# --- the memory environments ------------------------------------------------------------------


def test_observe_masks_cartpole_velocities():
    obs = jnp.array([[1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(rnn.observe(obs, True), [[1.0, 0.0, 3.0, 0.0]])
    np.testing.assert_array_equal(rnn.observe(obs, False), obs)
    setup = tiny(mask_velocity=True)
    state, traj = transitions(setup, rnn.init_state(setup, jax.random.PRNGKey(0)))
    assert not np.asarray(traj.obs[..., 1::2]).any() and not np.asarray(traj.final_obs[..., 1::2]).any()
    assert np.asarray(traj.obs[..., 0::2]).any()
    with pytest.raises(rnn.ArgsError, match="--mask-velocity needs --env-id CartPole-v1"):
        tiny(env_id="Acrobot-v1", mask_velocity=True)


def test_prev_action_reward_appends_one_hot_action_and_reward():
    setup = tiny(env_id="CartPole-v1", prev_action_reward=True)
    assert setup.spec.obs_shape == (4 + 2 + 1,)
    obs, env_state = rnn.reset_envs(setup.spec, jax.random.PRNGKey(0), 2)
    np.testing.assert_array_equal(obs[:, 4:], 0.0)  # an episode's start: no previous action
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    step = rnn.step_envs(setup.spec, keys, env_state, jnp.array([0, 1]))
    np.testing.assert_array_equal(step.obs[:, 4:], [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    bandit = tiny(env_id="BernoulliBandit-misc", prev_action_reward=True)
    state, traj = transitions(bandit, rnn.init_state(bandit, jax.random.PRNGKey(2)))
    np.testing.assert_array_equal(traj.obs[1:, :, -1], traj.reward[:-1])  # the last reward, fed back


def test_memory_chain_defeats_a_memoryless_observation():
    """MemoryChain-bsuite's context is seen only at the episode's start, its reward given at the end."""
    spec = rnn.make_env("MemoryChain-bsuite")
    assert spec.params.memory_length == 5 and spec.discrete and spec.action_dim == 2


# --- shapes, a smoke run, the evaluation ------------------------------------------------------


def test_shapes_under_jit_and_vmap_over_three_seeds():
    args = rnn.Flags(**TINY)
    state, metrics = jax.jit(jax.vmap(rnn.make_train(args)))(jax.random.split(jax.random.PRNGKey(0), 3))
    num_iterations = args.total_timesteps // (args.num_envs * args.num_steps)
    assert metrics.value_loss.shape == (3, num_iterations)
    assert state.hidden.shape == (3, args.num_envs, args.hidden_size)
    assert state.obs.shape == (3, args.num_envs, 4) and state.episode_start.shape == (3, args.num_envs)
    assert all(np.isfinite(getattr(metrics, name)).all() for name in ("value_loss", "policy_loss", "entropy"))
    assert not np.allclose(metrics.value_loss[0], metrics.value_loss[1])  # the seeds differ


def test_smoke_run_takes_gradient_steps_and_evaluates():
    setup = tiny(env_id="Pendulum-v1")
    start = rnn.init_state(setup, jax.random.PRNGKey(0))
    state, metrics = jax.jit(rnn.make_train(setup.args))(jax.random.PRNGKey(0))
    sizes, args = setup.sizes, setup.args
    adam = state.opt_state[1]  # clip_by_global_norm, then scale_by_adam: its step count
    assert int(adam.count) == sizes.num_iterations * args.update_epochs * args.num_minibatches
    for before, after in zip(jax.tree.leaves(start.params), jax.tree.leaves(state.params), strict=True):
        assert not np.allclose(before, after)  # every parameter moved (the GRU's, the log-std)
    assert np.isfinite(metrics.approx_kl).all() and (metrics.approx_kl > 0).any()
    algo = rnn.make_algorithm(setup.args)
    result = jax.jit(lambda m, k: rnn.evaluate_episodes(algo, 2, m, k))(
        algo.model(state), jax.random.PRNGKey(1)
    )
    assert result.returns.shape == (2,) and np.isfinite(result.returns).all()


def test_greedy_action_carries_the_hidden_state():
    setup = tiny()
    params = rnn.init_params(setup, jax.random.PRNGKey(0))
    hidden = rnn.initial_hidden(setup, params, 3)
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 4))
    action, hidden = rnn.greedy_action(setup, params, obs, hidden)
    assert action.shape == (3,) and hidden.shape == (3, setup.args.hidden_size)
    assert np.abs(hidden).max() > 0


# --- learning ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_learns_partially_observed_cartpole_where_the_feed_forward_policy_fails():
    """CartPole-v1 with the velocities hidden and rewards scaled (the benchmark entries' flags), at
    a reduced budget (300k steps, not their 500k, where the GRU's greedy evaluation must reach
    400): the mean training return of the last 20 iterations must pass 100, and twice what
    ppo_jax_scan's feed-forward policy reaches with the same flags, seed and budget."""
    final = {}
    for name, script in (("gru", rnn), ("feed-forward", ppo)):
        flags = dict(mask_velocity=True, normalize_reward=True, total_timesteps=300_000)
        args = script.Flags(env_id="CartPole-v1", **flags)
        _, metrics = jax.jit(script.make_train(args))(jax.random.PRNGKey(1))
        final[name] = float(np.nanmean(np.asarray(metrics.episodic_return)[-20:]))
    assert final["gru"] > 100 and final["gru"] > 2 * final["feed-forward"], final
