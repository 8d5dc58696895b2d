"""Tests of vibe_rl/td3_jax.py: the math of TD3's three ideas (clipped double Q, delayed policy
updates, target policy smoothing) and of DDPG without them, the replay buffer, time limits, shapes
under jit and vmap, chunks, learning. The command line (bad input, resume, the run directory) is
tested for every script in test_contract.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    AsymmetricBoxProbe,
    ConstantRewardProbe,
    check_a_normalized_run_saves_its_statistics,
    check_normalize_obs_paths,
    check_observation_statistics,
    check_statistics_of_every_observation_acted_in,
    load_script,
    probe_spec,
    run_in_chunks,
    train_setup,
    tree_equal,
)

td3 = load_script("td3_jax")

# 300 env steps in iterations of 50 (6 logged points); gradient steps from env step 100 on
TINY = dict(
    total_timesteps=300,
    learning_starts=100,
    batch_size=16,
    hidden_size=16,
    buffer_size=1000,
    log_frequency=50,
)


def tiny_args(**overrides) -> td3.Args:
    return td3.Flags(**{**TINY, **overrides})


# asymmetric bounds [-3, -1] and [0.5, 4], [A]: scale (high - low) / 2 = [1, 1.75]
LOW, HIGH = np.array([-3.0, 0.5], np.float32), np.array([-1.0, 4.0], np.float32)
SCALE, MID = (HIGH - LOW) / 2, (HIGH + LOW) / 2


# --- the math against hand-computed values -----------------------------------------------


def test_td_target_bootstraps_through_truncation_not_termination():
    """The buffer marks a truncated step terminated = 0 (it stores the real final observation),
    so its target bootstraps; a terminated step's target is its reward alone."""
    reward = jnp.array([1.0, 1.0, -2.0])
    terminated = jnp.array([0.0, 1.0, 0.0])  # continuing or truncated; terminated; truncated
    next_q = jnp.array([10.0, 10.0, -4.0])
    target = td3.td_target(reward, terminated, next_q, 0.9)
    np.testing.assert_allclose(target, [1 + 0.9 * 10, 1.0, -2 + 0.9 * -4], rtol=1e-6)


def test_clipped_double_q_takes_the_min_and_ddpg_the_single_critic():
    next_q = jnp.array([[1.0, 5.0, -2.0], [3.0, 2.0, -1.0]])  # [C=2, B]
    np.testing.assert_allclose(td3.bootstrap_q(next_q, clipped_double_q=True), [1.0, 2.0, -2.0])
    np.testing.assert_allclose(td3.bootstrap_q(next_q, clipped_double_q=False), [1.0, 5.0, -2.0])
    np.testing.assert_allclose(td3.bootstrap_q(next_q[:1], clipped_double_q=False), [1.0, 5.0, -2.0])


def test_target_policy_smoothing_noise_is_clipped_and_scaled_to_the_bounds():
    action = jnp.tile(jnp.asarray(MID), (20_000, 1))  # [B, A] mid-range: the bounds never clip
    key = jax.random.PRNGKey(0)
    smoothed = td3.smoothed_target_action(action, key, 0.2, 0.5, LOW, HIGH)
    noise = np.asarray(smoothed - action) / SCALE  # [B, A] in units of the scale
    assert np.abs(noise).max() <= 0.5 + 1e-6
    assert (np.abs(noise) > 0.499).mean() > 0.005  # N(0, 0.2) beyond 2.5 std: clipped, ~1.2%
    np.testing.assert_allclose(noise.std(axis=0), 0.2, rtol=0.05)  # clipping barely shrinks it
    wide = np.abs(np.asarray(td3.smoothed_target_action(action, key, 100.0, 0.5, LOW, HIGH) - action))
    assert (wide / SCALE).max() <= 0.5 + 1e-6 and (wide / SCALE > 0.4999).mean() > 0.99  # all but ~0.4%
    np.testing.assert_array_equal(td3.smoothed_target_action(action, key, 0.0, 0.5, LOW, HIGH), action)
    at_bound = jnp.tile(jnp.asarray(HIGH), (1000, 1))  # the sum is clipped to the bounds
    clipped = td3.smoothed_target_action(at_bound, key, 0.2, 0.5, LOW, HIGH)
    assert bool(jnp.all((clipped >= LOW) & (clipped <= HIGH)))


def test_exploration_noise_is_scaled_to_the_bounds_and_clipped():
    action = jnp.tile(jnp.asarray(MID), (20_000, 1))
    explored = td3.explore(action, jax.random.PRNGKey(1), 0.1, LOW, HIGH)
    np.testing.assert_allclose(np.asarray(explored - action).std(axis=0), 0.1 * SCALE, rtol=0.05)
    at_bound = td3.explore(jnp.tile(jnp.asarray(LOW), (1000, 1)), jax.random.PRNGKey(2), 0.5, LOW, HIGH)
    assert bool(jnp.all((at_bound >= LOW) & (at_bound <= HIGH)))


def test_critic_and_actor_losses_hand_computed():
    q = jnp.array([[1.0, 2.0], [3.0, 0.0]])  # [2, B]
    loss, info = td3.critic_loss_fn(q, jnp.array([1.0, 1.0]))
    # critic 1: (0 + 1) / 2 = 0.5; critic 2: (4 + 1) / 2 = 2.5
    np.testing.assert_allclose([loss, info.qf1_loss, info.qf2_loss, info.qf_loss], [3.0, 0.5, 2.5, 1.5])
    np.testing.assert_allclose([info.qf1_values, info.qf2_values], [1.5, 1.5])
    loss, info = td3.critic_loss_fn(q[:1], jnp.array([1.0, 1.0]))  # DDPG: one critic
    np.testing.assert_allclose([loss, info.qf1_loss, info.qf_loss], [0.5, 0.5, 0.5])
    assert np.isnan(info.qf2_loss) and np.isnan(info.qf2_values)
    np.testing.assert_allclose(td3.actor_loss_fn(q[0]), -1.5)


def test_actor_output_is_rescaled_to_asymmetric_bounds():
    spec = probe_spec(td3, AsymmetricBoxProbe())
    np.testing.assert_allclose(spec.action_low, LOW)
    np.testing.assert_allclose(spec.action_high, HIGH)
    setup = td3.build_setup(tiny_args(hidden_size=8), spec)
    params = td3.init_state(setup, jax.random.PRNGKey(0)).learner.params
    big = jax.tree.map(lambda x: x * 100.0, params.actor)  # saturates the tanh
    action = setup.actor.apply(big, jnp.linspace(-5, 5, 101)[:, None])  # [101, A]
    assert bool(jnp.all((action >= LOW) & (action <= HIGH)))
    assert np.isclose(action, LOW, atol=1e-3).any() or np.isclose(action, HIGH, atol=1e-3).any()
    zero = jax.tree.map(jnp.zeros_like, params.actor)  # tanh(0) = 0: the midpoint
    np.testing.assert_allclose(setup.actor.apply(zero, jnp.ones((1, 1)))[0], MID)


@pytest.mark.parametrize(("index", "actor_step"), [(6, True), (7, False)])
def test_delayed_policy_update_and_polyak_targets(index, actor_step):
    """[TD3-2, TD3-8] the critics learn every step; every policy_frequency steps the actor takes a
    step and the targets (actor and critics) move to tau * online + (1 - tau) * target; else the
    actor and the targets stay."""
    setup = td3.build_setup(tiny_args(tau=0.1, policy_frequency=3))
    learner = td3.init_state(setup, jax.random.PRNGKey(0)).learner
    plus_one = lambda tree: jax.tree.map(lambda x: x + 1.0, tree)  # targets that differ from the nets
    params = learner.params._replace(
        actor_target=plus_one(learner.params.actor), critic_target=plus_one(learner.params.critic)
    )
    learner = learner._replace(params=params)
    buffer = td3.buffer_init(rows=4, num_envs=1, obs_dim=3, action_dim=1)
    row = td3.Transition(jnp.ones((1, 3)), jnp.zeros((1, 1)), jnp.ones(1), jnp.ones((1, 3)), jnp.zeros(1))
    buffer = td3.buffer_add(buffer, row)
    after, critic_info, actor_info = jax.jit(functools.partial(td3.learn, setup))(
        learner, buffer, td3.rms_init(3), jax.random.PRNGKey(1), index
    )
    assert np.isfinite(critic_info.qf_loss) and not tree_equal(after.params.critic, params.critic)
    assert np.isfinite(actor_info.actor_loss) == actor_step
    assert tree_equal(after.params.actor, params.actor) != actor_step
    for online, name in ((after.params.actor, "actor_target"), (after.params.critic, "critic_target")):
        before = getattr(params, name)
        expected = jax.tree.map(lambda o, t: 0.1 * o + 0.9 * t, online, before) if actor_step else before
        for a, b in zip(jax.tree.leaves(getattr(after.params, name)), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_ddpg_sets_exactly_its_three_flags():
    args = td3.ddpg_flags(tiny_args(ddpg=True, policy_frequency=4, policy_noise=0.3))
    assert (args.clipped_double_q, args.policy_frequency, args.target_policy_smoothing) == (False, 1, False)
    assert args.policy_noise == 0.3 and args.noise_clip == 0.5 and args.tau == 0.005  # the rest stays
    setup = td3.build_setup(tiny_args(ddpg=True))
    assert setup.sizes.num_critics == 1 and setup.args.policy_frequency == 1
    critic = td3.init_state(setup, jax.random.PRNGKey(0)).learner.params.critic
    assert all(x.shape[0] == 1 for x in jax.tree.leaves(critic))
    assert td3.make_algorithm(tiny_args(ddpg=True)).name == "DDPG"


def test_replay_buffer_ring_and_sampling():
    buffer = td3.buffer_init(rows=3, num_envs=2, obs_dim=1, action_dim=1)
    for t in range(4):  # the 4th row overwrites the 1st
        v = jnp.full((2,), float(t))
        buffer = td3.buffer_add(buffer, td3.Transition(v[:, None], v[:, None], v, v[:, None] + 0.5, v * 0))
    assert int(buffer.filled) == 3 and int(buffer.position) == 1
    np.testing.assert_allclose(buffer.data.reward[:, 0], [3.0, 1.0, 2.0])
    batch = td3.buffer_sample(buffer, jax.random.PRNGKey(0), 500)
    assert batch.obs.shape == (500, 1) and set(np.unique(batch.reward).tolist()) == {1.0, 2.0, 3.0}
    np.testing.assert_allclose(batch.next_obs[:, 0], batch.obs[:, 0] + 0.5)  # rows stay together


def test_discrete_env_is_refused():
    with pytest.raises(td3.ArgsError, match="TD3 needs continuous \\(Box\\) actions; use vibe_rl/dqn_jax.py"):
        td3.build_setup(tiny_args(env_id="CartPole-v1"))


# --- time limits ---------------------------------------------------------------------------


def test_pendulum_truncation_stores_the_real_final_observation():
    """Pendulum's episodes end only by the 200-step time limit: the buffer row of the last step
    holds the observation reached (not the reset one) and terminated = 0."""
    args = tiny_args(total_timesteps=900, learning_starts=800, num_envs=2, log_frequency=2)  # 1 step each
    state, metrics = jax.jit(td3.make_train(args))(jax.random.PRNGKey(0))
    data = state.buffer.data
    np.testing.assert_array_equal(np.asarray(metrics.episodic_length)[[199, 399]], [200, 200])
    assert float(data.terminated.sum()) == 0.0
    obs, next_obs = np.asarray(data.obs[:450]), np.asarray(data.next_obs[:450])
    continuing = np.ones(449, bool)
    continuing[[199, 399]] = False
    np.testing.assert_array_equal(next_obs[:-1][continuing], obs[1:][continuing])
    for t in (199, 399):  # the step that hit the time limit
        assert not np.allclose(next_obs[t], obs[t + 1])  # obs[t + 1] is a fresh episode
        np.testing.assert_allclose(next_obs[t, :, 0] ** 2 + next_obs[t, :, 1] ** 2, 1.0, rtol=1e-5)
        assert np.all(np.abs(next_obs[t, :, 2] - obs[t, :, 2]) < 1.5)


@pytest.mark.parametrize("ddpg", [False, True])
def test_q_bootstraps_through_time_limit_on_a_probe(ddpg):
    """Constant reward 1, only time-limit ends (after 5 steps), gamma 0.5: Q must reach
    1 / (1 - gamma) = 2 for every critic. Treating the truncation as a termination gives ~1.6."""
    args = tiny_args(
        total_timesteps=2000, learning_starts=64, batch_size=64, num_envs=4, gamma=0.5, tau=0.1, ddpg=ddpg
    )
    setup = td3.build_setup(args, probe_spec(td3, ConstantRewardProbe(continuous=True)))
    state, _ = jax.jit(functools.partial(train_setup, td3, setup))(jax.random.PRNGKey(0))
    data = state.buffer.data
    q = td3.critics(setup, state.learner.params.critic, data.obs.reshape(-1, 1), data.action.reshape(-1, 1))
    assert q.shape[0] == (1 if ddpg else 2)
    np.testing.assert_allclose(q.mean(axis=1), 2.0, atol=0.1)


# --- shapes under jit and vmap; chunks equal the single program ------------------------


def test_train_shapes_under_jit_and_vmap():
    args = tiny_args(num_envs=2)  # 150 steps in 6 iterations of 25; learning from step 50 on
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(td3.make_train(args)))(keys)
    setup = td3.build_setup(args)
    assert setup.sizes == td3.Sizes(150, 25, 6, 500, 2)
    assert state.obs.shape == (3, 2, 3)
    assert state.buffer.data.obs.shape == (3, 500, 2, 3) and state.buffer.filled.tolist() == [150] * 3
    assert state.buffer.data.action.shape == (3, 500, 2, 1)
    assert all(x.shape == (3, 6) for x in metrics)
    assert np.isnan(metrics.qf_loss[:, :2]).all() and np.isfinite(metrics.qf_loss[:, 2:]).all()
    assert np.isfinite(metrics.actor_loss[:, 2:]).all() and np.isfinite(metrics.qf2_loss[:, 2:]).all()
    init = jax.jit(jax.vmap(functools.partial(td3.init_state, setup)))(keys)
    for name in td3.TD3Params._fields:  # gradient steps taken, targets moved
        assert not tree_equal(getattr(init.learner.params, name), getattr(state.learner.params, name)), name
    assert not np.allclose(metrics.qf_loss[0, 2:], metrics.qf_loss[1, 2:])  # independent seeds
    model = jax.tree.map(lambda x: x[0], td3.SavedModel(state.learner.params, state.obs_rms))
    greedy = td3.greedy_action(setup, model, jnp.zeros((7, 3)))
    assert greedy.shape == (7, 1) and bool(jnp.all(jnp.abs(greedy) <= 2.0))
    # without --normalize-obs the observation statistics stay where they started
    np.testing.assert_array_equal(state.obs_rms.mean, 0.0)
    np.testing.assert_array_equal(state.obs_rms.var, 1.0)


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    """The harness's chunks (the CLI's program) end where make_train's single scan ends."""
    args = tiny_args(total_timesteps=350, num_chunks=3)  # 7 iterations: chunks of 3, the last masks 2
    algo = td3.make_algorithm(args)
    assert (algo.num_iterations, *td3.plan_chunks(algo.num_iterations, args.num_chunks)) == (7, 3, 3)
    key = jax.random.PRNGKey(7)
    final, metrics = jax.jit(td3.make_train(args))(key)
    state, chunk_metrics = run_in_chunks(td3, algo, key, args.num_chunks)
    chunked = jax.tree.map(lambda *xs: np.concatenate(xs), *chunk_metrics)  # [9]
    assert np.isnan(chunked.qf_loss[7:]).all()  # the masked iterations
    assert np.isfinite(chunked.actor_loss[2:7]).all()  # gradient steps taken
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(chunked.qf_loss[:7], metrics.qf_loss, rtol=1e-4)


# --- --normalize-obs [TD3-11]: running observation statistics ------------------------------


def test_observation_statistics_merge_to_numpys_mean_and_var():
    """Batches of 7, 1 and 12 observations merged one after another give numpy's mean and
    (population) variance of all 20; normalize maps them to mean 0 and std 1, clips at +-10,
    and is the identity when off (_helpers.check_observation_statistics)."""
    check_observation_statistics(td3)


def test_normalize_obs_keeps_the_statistics_of_every_observation_acted_in():
    """Under jit and vmap over 3 seeds, each seed's statistics are numpy's over the observations
    it acted in, random steps included. 150 steps of 2 envs; learning from step 50 on."""
    check_statistics_of_every_observation_acted_in(td3, tiny_args(num_envs=2, normalize_obs=True))


def test_normalize_obs_normalises_the_batches_the_acting_and_the_evaluation():
    """A gradient step, an env step and the evaluation action with --normalize-obs equal those
    without it on observations normalised by hand (_helpers.check_normalize_obs_paths)."""
    check_normalize_obs_paths(td3, tiny_args(normalize_obs=True), tiny_args(normalize_obs=False))


def test_a_normalized_run_saves_its_statistics(tmp_path):
    """--normalize-obs from the command line: the checkpoint and the saved model hold the
    statistics of the observations acted in, and the saved model evaluates as the run did.
    (That a stopped run resumes them exactly is test_contract.py's resume test.)"""
    check_a_normalized_run_saves_its_statistics(td3, tmp_path)


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_pendulum_learns_within_20k_steps():
    """20k env steps, learning_starts 1000, the other defaults (256-unit layers), seed 1: the
    deterministic evaluation (the harness's, 32 episodes, its key) reaches >= -200 (a random
    policy scores about -1200; docs/td3_jax.md has the measured return)."""
    args = td3.Flags(total_timesteps=20_000, learning_starts=1000)
    algo = td3.make_algorithm(args)
    key = jax.random.PRNGKey(1)
    state, _ = jax.jit(td3.make_train(args))(key)
    evaluate = jax.jit(lambda s, k: td3.evaluate_episodes(algo, 32, algo.model(s), k).returns)
    mean = float(np.asarray(evaluate(state, jax.random.fold_in(key, 1))).mean())
    print("deterministic evaluation, seed 1:", mean)
    assert mean >= -200, mean
