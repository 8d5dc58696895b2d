"""Tests of vibe_rl/sac_jax.py: the policy's math, the losses, the replay buffer, time limits, the
logged iterations, shapes under jit and vmap, chunks, learning. The command line (bad input, resume,
the run directory) is tested for every script in test_contract.py."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
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

sac = load_script("sac_jax")

# 300 env steps in iterations of 50 (6 logged points); gradient steps from env step 100 on
TINY = dict(
    total_timesteps=300,
    learning_starts=100,
    batch_size=16,
    hidden_size=16,
    buffer_size=1000,
    log_frequency=50,
)


def tiny_args(**overrides) -> sac.Args:
    return sac.Flags(**{**TINY, **overrides})


# --- the policy: a tanh-squashed Gaussian rescaled to the bounds --------------------------

# asymmetric bounds [-3, 0.5] to [1, 4], [A]; the policy's affine map a = scale * tanh(x) + bias
LOW, HIGH = np.array([-3.0, 0.5], np.float32), np.array([1.0, 4.0], np.float32)
SCALE, BIAS = (HIGH - LOW) / 2, (HIGH + LOW) / 2


def test_log_prob_matches_change_of_variables_numerically():
    """Sample, then recompute each density in float64: invert the squashing, take the Gaussian
    density of the pre-image and divide by a finite-difference Jacobian."""
    scale, bias = SCALE, BIAS
    mean = jnp.array([[0.3, -1.2], [1.5, 0.0], [-0.4, 0.8]])  # [3, A]
    log_std = jnp.array([[-0.5, 0.2], [-1.0, -0.3], [0.4, -2.0]])
    mean, log_std = jnp.tile(mean, (100, 1)), jnp.tile(log_std, (100, 1))  # [300, A]
    policy = sac.squashed_gaussian(mean, log_std, LOW, HIGH)
    action, log_prob = policy.sample_and_log_prob(seed=jax.random.PRNGKey(0))
    assert action.shape == (300, 2) and log_prob.shape == (300,)

    a, mu, sigma = (np.asarray(v, np.float64) for v in (action, mean, jnp.exp(log_std)))
    x = np.arctanh(np.clip((a - bias) / scale, -1 + 1e-12, 1 - 1e-12))  # the Gaussian sample
    h = 1e-6
    jacobian = (scale * np.tanh(x + h) - scale * np.tanh(x - h)) / (2 * h)  # da/dx, numerically
    gaussian = np.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))
    reference = np.sum(np.log(gaussian) - np.log(jacobian), axis=-1)
    finite = np.abs(x).max(axis=-1) < 4  # float32 actions lose the pre-image near the bounds
    assert finite.mean() > 0.9
    np.testing.assert_allclose(np.asarray(log_prob)[finite], reference[finite], rtol=2e-3, atol=2e-3)


def test_log_prob_stays_exact_where_tanh_saturates():
    """Wide Gaussians push x far into tanh's flat tails, where float32's 1 - tanh(x)^2 is 0 and
    its log -inf. The policy's log-probabilities stay finite there and equal the float64 value,
    with log(1 - tanh(x)^2) = -2 log cosh(x) (exact in float64 for |x| < 700). The Gaussian
    sample x is the float32 one the policy drew (its base distribution, the same key)."""
    scale, bias = SCALE, BIAS
    mean = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (4096, 2))
    log_std = jax.random.uniform(
        jax.random.PRNGKey(2), (4096, 2), minval=sac.LOG_STD_MIN, maxval=sac.LOG_STD_MAX
    )
    key = jax.random.PRNGKey(3)
    policy = lambda m, s: sac.squashed_gaussian(m, s, LOW, HIGH)
    action, log_prob = jax.jit(lambda m, s: policy(m, s).sample_and_log_prob(seed=key))(mean, log_std)
    gaussian_sample = jax.jit(lambda m, s: policy(m, s).distribution.sample(seed=key))(mean, log_std)

    x, mu, ls = (np.asarray(v, np.float64) for v in (gaussian_sample, mean, log_std))
    noise = (x - mu) / np.exp(ls)
    assert np.abs(x).max() > 20  # saturated: float32 tanh(x) is exactly +-1 beyond about 9
    log_normal = -0.5 * noise**2 - ls - 0.5 * np.log(2 * np.pi)
    reference = np.sum(log_normal - np.log(scale) + 2 * np.log(np.cosh(x)), axis=-1)
    assert bool(jnp.all(jnp.isfinite(log_prob)))
    np.testing.assert_allclose(action, scale * np.tanh(x) + bias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_prob, reference, rtol=1e-5, atol=1e-3)


def test_log_prob_matches_the_sample_histogram():
    """1-D: exp(log_prob) at 200k samples, averaged per bin, matches the histogram of those samples:
    the density the policy reports is the density it samples from."""
    mean, log_std = jnp.full((200_000, 1), 0.4), jnp.full((200_000, 1), -0.2)
    policy = sac.squashed_gaussian(mean, log_std, np.array([-1.0]), np.array([3.0]))
    action, log_prob = policy.sample_and_log_prob(seed=jax.random.PRNGKey(1))
    action, density = np.asarray(action[:, 0]), np.exp(np.asarray(log_prob))
    counts, edges = np.histogram(action, bins=40, range=(-1.0, 3.0), density=True)
    in_bin = np.digitize(action, edges[1:-1])  # [200k]: each sample's bin
    reported = np.bincount(in_bin, weights=density, minlength=40) / np.bincount(in_bin, minlength=40)
    interior = slice(2, -2)  # the density is steep at the edges of the bounds
    np.testing.assert_allclose(counts[interior], reported[interior], rtol=0.08, atol=0.01)


def test_log_std_is_squashed_into_its_range():
    raw = jnp.array([-1e3, -1.0, 0.0, 1.0, 1e3])
    log_std = sac.squash_log_std(raw)
    np.testing.assert_allclose(np.asarray(log_std)[[0, 2, 4]], [sac.LOG_STD_MIN, -1.5, sac.LOG_STD_MAX])
    assert bool(jnp.all(jnp.diff(log_std) > 0))


@pytest.mark.parametrize("layer_norm", [False, True])
def test_critic_layer_norm_makes_q_blind_to_the_scale_of_its_first_layer(layer_norm):
    """--critic-layer-norm: each hidden ReLU's output is layer-normalised (Brax's q_network_layer_norm), so
    scaling the first layer's weights and bias by 10 (ReLU keeps the factor) leaves Q as it was; without it
    Q changes. The actor's torso has no layer norm either way."""
    critic = sac.QNetwork(hidden_size=32, layer_norm=layer_norm)
    obs, action = jax.random.normal(jax.random.PRNGKey(0), (64, 5)), jnp.full((64, 2), 0.3)
    params = critic.init(jax.random.PRNGKey(1), obs, action)["params"]
    assert ("LayerNorm_1" in params) == layer_norm and "LayerNorm_2" not in params
    scaled = {**params, "Dense_0": jax.tree.map(lambda x: 10.0 * x, params["Dense_0"])}
    q, q_scaled = (critic.apply({"params": p}, obs, action) for p in (params, scaled))  # [64] each
    assert np.allclose(q, q_scaled, atol=1e-3) == layer_norm
    state = jax.eval_shape(sac.make_algorithm(sac.Flags(critic_layer_norm=True)).init, jax.random.PRNGKey(0))
    critics, actor = state.learner.params.critic["params"], state.learner.params.actor["params"]
    assert "LayerNorm_0" in critics and "LayerNorm_0" not in actor


def test_actions_respect_asymmetric_bounds():
    spec = probe_spec(sac, AsymmetricBoxProbe())
    low, high = spec.action_low, spec.action_high
    np.testing.assert_allclose(low, [-3.0, 0.5])
    np.testing.assert_allclose(high, [-1.0, 4.0])
    # the evaluation action (the squashing of the mean): saturated means reach the bounds, a zero
    # mean gives the midpoint
    mean = jnp.array([[-50.0, -50.0], [0.0, 0.0], [50.0, 50.0]])
    policy = sac.squashed_gaussian(mean, jnp.zeros((3, 2)), low, high)
    np.testing.assert_allclose(policy.bijector.forward(mean), [low, (low + high) / 2, high])
    wide = sac.squashed_gaussian(jnp.repeat(mean, 1000, 0), jnp.full((3000, 2), 2.0), low, high)
    action = wide.sample(seed=jax.random.PRNGKey(0))
    assert bool(jnp.all((action >= low) & (action <= high)))

    # the training stores only in-bounds actions, random (before learning_starts) and policy
    setup = sac.build_setup(tiny_args(learning_starts=50, total_timesteps=150, num_envs=2), spec)
    state, metrics = jax.jit(functools.partial(train_setup, sac, setup))(jax.random.PRNGKey(3))
    stored = state.buffer.data.action[: int(state.buffer.filled)]  # [rows, N, A]
    assert bool(jnp.all((stored >= low) & (stored <= high)))
    assert np.isfinite(metrics.qf_loss).sum() > 0  # the policy acted and learned
    model = sac.SavedModel(state.learner.params, state.obs_rms)
    greedy = sac.greedy_action(setup, model, jnp.linspace(0, 1, 7)[:, None])  # [7, A]
    assert greedy.shape == (7, 2) and bool(jnp.all((greedy >= low) & (greedy <= high)))


# --- losses and targets against hand-computed values -------------------------------------


def test_td_target_hand_computed():
    reward = jnp.array([1.0, 1.0, 2.0])
    terminated = jnp.array([0.0, 1.0, 0.0])
    next_q = jnp.array([10.0, 10.0, -4.0])
    next_log_prob = jnp.array([-1.0, -1.0, 2.0])
    target = sac.td_target(reward, terminated, next_q, next_log_prob, jnp.asarray(0.5), 0.9)
    # 1 + 0.9 * (10 + 0.5) = 10.45; terminated: 1; 2 + 0.9 * (-4 - 1) = -2.5
    np.testing.assert_allclose(target, [10.45, 1.0, -2.5], rtol=1e-6)


def test_critic_and_actor_losses_hand_computed():
    q = jnp.array([[1.0, 2.0], [3.0, 0.0]])  # [2, B]
    loss, info = sac.critic_loss_fn(q, jnp.array([1.0, 1.0]))
    # critic 1: (0 + 1) / 2 = 0.5; critic 2: (4 + 1) / 2 = 2.5
    np.testing.assert_allclose([loss, info.qf1_loss, info.qf2_loss, info.qf_loss], [3.0, 0.5, 2.5, 1.5])
    np.testing.assert_allclose([info.qf1_values, info.qf2_values], [1.5, 1.5])
    actor_loss = sac.actor_loss_fn(jnp.array([-1.0, 1.0]), q, jnp.asarray(0.5))
    # min over the twins: [1, 0]; (0.5 * -1 - 1 + 0.5 * 1 - 0) / 2 = -0.5
    np.testing.assert_allclose(actor_loss, -0.5)


@pytest.mark.parametrize(("log_prob", "direction"), [(2.0, +1), (-3.0, -1)])
def test_alpha_moves_toward_the_target_entropy(log_prob, direction):
    """Target entropy -1. Entropy -log_prob = -2 is below it: alpha must grow; entropy 3 is
    above it: alpha must shrink. Adam steps on log_alpha, as in the training."""
    log_alpha = jnp.asarray(0.0)
    optimizer = optax.adam(1e-2)
    opt_state = optimizer.init(log_alpha)
    log_probs = jnp.full((64,), log_prob)
    grad = jax.grad(sac.alpha_loss_fn)(log_alpha, log_probs, -1.0)
    assert math.copysign(1, -float(grad)) == direction
    for _ in range(50):
        grad = jax.grad(sac.alpha_loss_fn)(log_alpha, log_probs, -1.0)
        updates, opt_state = optimizer.update(grad, opt_state)
        log_alpha = optax.apply_updates(log_alpha, updates)
    assert direction * float(log_alpha) > 0.3


def test_no_autotune_uses_the_states_log_alpha_and_keeps_it():
    """alpha is exp(log_alpha) of the state, always; --no-autotune only stops its updates. It starts
    at --alpha; a state holding another log_alpha trains and logs with that one, unchanged."""
    setup = sac.build_setup(tiny_args(autotune=False, alpha=0.3))
    state = sac.init_state(setup, jax.random.PRNGKey(0))
    np.testing.assert_allclose(jnp.exp(state.learner.params.log_alpha), 0.3, rtol=1e-6)
    params = state.learner.params._replace(log_alpha=jnp.log(jnp.float32(0.05)))
    state = state._replace(learner=state.learner._replace(params=params))
    run = jax.jit(functools.partial(sac.iteration, setup))
    alphas = []
    for index in range(setup.sizes.num_iterations):
        state, metrics = run(state, jnp.int32(index))
        alphas.append(float(metrics.alpha))
        assert np.isnan(metrics.alpha_loss)
    assert np.isnan(alphas[:2]).all()  # iterations 0 and 1: no gradient step yet
    np.testing.assert_allclose(alphas[2:], 0.05, rtol=1e-6)
    assert float(state.learner.params.log_alpha) == float(jnp.log(jnp.float32(0.05)))


@pytest.mark.parametrize(("index", "updated"), [(6, True), (7, False)])
def test_polyak_update_of_the_target_critics(index, updated):
    """[SAC-8] a gradient step moves the target critics to tau * critics + (1 - tau) * target, when
    the step's number is a multiple of --target-network-frequency; else they stay."""
    setup = sac.build_setup(tiny_args(tau=0.1, target_network_frequency=3, policy_frequency=2))
    learner = sac.init_state(setup, jax.random.PRNGKey(0)).learner
    targets = jax.tree.map(lambda x: x + 1.0, learner.params.critic)  # differ from the critics
    learner = learner._replace(params=learner.params._replace(critic_target=targets))
    buffer = sac.buffer_init(rows=4, num_envs=1, obs_dim=3, action_dim=1)
    row = sac.Transition(jnp.ones((1, 3)), jnp.zeros((1, 1)), jnp.ones(1), jnp.ones((1, 3)), jnp.zeros(1))
    buffer, obs_rms = sac.buffer_add(buffer, row), sac.rms_init(3)
    learn = jax.jit(functools.partial(sac.learn, setup))
    after, _, _ = learn(learner, buffer, obs_rms, jax.random.PRNGKey(1), index)
    critics = after.params.critic  # after this step's critic update
    expected = jax.tree.map(lambda c, t: 0.1 * c + 0.9 * t, critics, targets) if updated else targets
    for a, b in zip(jax.tree.leaves(after.params.critic_target), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_replay_buffer_ring_and_sampling():
    buffer = sac.buffer_init(rows=3, num_envs=2, obs_dim=1, action_dim=1)
    for t in range(4):  # the 4th row overwrites the 1st
        v = jnp.full((2,), float(t))
        buffer = sac.buffer_add(buffer, sac.Transition(v[:, None], v[:, None], v, v[:, None] + 0.5, v * 0))
    assert int(buffer.filled) == 3 and int(buffer.position) == 1
    np.testing.assert_allclose(buffer.data.reward[:, 0], [3.0, 1.0, 2.0])
    batch = sac.buffer_sample(buffer, jax.random.PRNGKey(0), 500)
    assert batch.obs.shape == (500, 1) and batch.action.shape == (500, 1)
    assert set(np.unique(batch.reward).tolist()) == {1.0, 2.0, 3.0}
    np.testing.assert_allclose(batch.next_obs[:, 0], batch.obs[:, 0] + 0.5)  # rows stay together


# --- time limits: Pendulum only ends by truncation ---------------------------------------


def test_pendulum_truncation_stores_the_real_final_observation():
    """Pendulum's episodes end only by the 200-step time limit. The buffer row of the last
    step must hold the observation reached (not the reset one) and terminated = 0, so the
    TD target bootstraps through the truncation."""
    args = tiny_args(total_timesteps=900, learning_starts=800, num_envs=2, log_frequency=2)  # 1 step each
    state, metrics = jax.jit(sac.make_train(args))(jax.random.PRNGKey(0))
    data = state.buffer.data
    np.testing.assert_array_equal(np.asarray(metrics.episodic_length)[[199, 399]], [200, 200])
    assert float(data.terminated.sum()) == 0.0
    obs, next_obs = np.asarray(data.obs[:450]), np.asarray(data.next_obs[:450])
    continuing = np.ones(449, bool)
    continuing[[199, 399]] = False
    np.testing.assert_array_equal(next_obs[:-1][continuing], obs[1:][continuing])
    for t in (199, 399):  # the step that hit the time limit
        assert not np.allclose(next_obs[t], obs[t + 1])  # obs[t + 1] is a fresh episode
        # the final observation continues the trajectory: cos^2 + sin^2 = 1, angular velocity
        # changed by at most one step of the dynamics
        np.testing.assert_allclose(next_obs[t, :, 0] ** 2 + next_obs[t, :, 1] ** 2, 1.0, rtol=1e-5)
        assert np.all(np.abs(next_obs[t, :, 2] - obs[t, :, 2]) < 1.5)


def test_q_bootstraps_through_time_limit_on_a_probe():
    """Constant reward 1, only time-limit ends, gamma 0.5, alpha 0: Q must reach
    1 / (1 - gamma) = 2. Treating the truncation as a termination would give ~1.6."""
    args = tiny_args(
        total_timesteps=2000,
        learning_starts=64,
        batch_size=64,
        num_envs=4,
        gamma=0.5,
        tau=0.1,
        autotune=False,
    )
    setup = sac.build_setup(
        dataclasses.replace(args, alpha=0.0), probe_spec(sac, ConstantRewardProbe(continuous=True))
    )
    state, _ = jax.jit(functools.partial(train_setup, sac, setup))(jax.random.PRNGKey(0))
    # Q of both critics at the stored (obs, action) pairs: the actions the policy takes
    data = state.buffer.data
    q = sac.twin_q(setup, state.learner.params.critic, data.obs.reshape(-1, 1), data.action.reshape(-1, 1))
    np.testing.assert_allclose(q.mean(axis=1), [2.0, 2.0], atol=0.1)


# --- the logged iterations ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("total_timesteps", "num_envs", "log_frequency", "sizes"),
    [
        (50_000, 1, 100, (50_000, 100, 500)),
        (1009, 1, 100, (1000, 100, 10)),  # a prime budget: whole iterations of 100, not 1009 of 1
        (50_021, 1, 100, (50_000, 100, 500)),  # prime too
        (50_000, 3, 100, (16_665, 33, 505)),  # 16,666 steps: 505 iterations of 33
        (40, 4, 1, (10, 1, 10)),  # an iteration is at least one step
        (50, 1, 100, (50, 50, 1)),  # a budget below one iteration: one iteration
    ],
)
def test_iterations_keep_their_size_and_the_run_is_rounded_to_whole_iterations(
    total_timesteps, num_envs, log_frequency, sizes
):
    args = sac.Flags(  # batches of 32: no more than the smallest run's 40 transitions
        total_timesteps=total_timesteps, num_envs=num_envs, log_frequency=log_frequency, learning_starts=0,
        batch_size=32,
    )  # fmt: skip
    algo = sac.make_algorithm(args)
    assert algo.sizes[:3] == sizes  # total_steps, steps_per_iteration, num_iterations
    assert algo.num_iterations == sizes[2] and algo.env_steps_per_iteration == sizes[1] * num_envs


def test_an_iteration_logs_the_means_of_its_steps():
    """Iterations of 5 steps train as iterations of 1 (to float rounding: two programs), and log the
    means of their numbers: over the gradient steps taken (NaN when none) and over the episodes
    that ended in them. (Under the suite's compile flags the two programs round differently, and
    Pendulum's swings and the gradient steps amplify it: 100 gradient steps, from step 200 on.)"""
    sizes = dict(total_timesteps=600, num_envs=2, learning_starts=400)
    one, five = (tiny_args(**sizes, log_frequency=f) for f in (2, 10))
    key = jax.random.PRNGKey(4)
    state_1, metrics_1 = jax.jit(sac.make_train(one))(key)  # [300] points
    state_5, metrics_5 = jax.jit(sac.make_train(five))(key)  # [60]
    assert np.isfinite(metrics_5.qf_loss).sum() == 20  # iterations 40-59 took gradient steps
    for a, b in zip(jax.tree.leaves(state_1), jax.tree.leaves(state_5), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)  # to float rounding
    with warnings.catch_warnings():  # "mean of empty slice": an all-NaN group's mean is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        grouped = jax.tree.map(lambda x: np.nanmean(np.asarray(x).reshape(60, 5), axis=1), metrics_1)
    for name in sac.Metrics._fields:  # Pendulum: the 2 envs end their episodes at the same step
        np.testing.assert_allclose(getattr(metrics_5, name), getattr(grouped, name), rtol=1e-4, err_msg=name)
    assert np.isfinite(metrics_5.episodic_return).sum() == 1  # the episodes ending at step 200


# --- shapes under jit and vmap; chunks equal the single program ------------------------


def test_train_shapes_under_jit_and_vmap():
    args = tiny_args(num_envs=2)  # 150 steps in 6 iterations of 25; learning from step 50 on
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(sac.make_train(args)))(keys)
    setup = sac.build_setup(args)
    assert setup.sizes == sac.Sizes(150, 25, 6, 500)
    assert state.obs.shape == (3, 2, 3)
    assert state.buffer.data.obs.shape == (3, 500, 2, 3) and state.buffer.filled.tolist() == [150] * 3
    assert all(x.shape == (3, 6) for x in metrics)
    assert np.isnan(metrics.qf_loss[:, :2]).all() and np.isfinite(metrics.qf_loss[:, 2:]).all()
    assert np.isfinite(metrics.actor_loss[:, 2:]).all() and np.isfinite(metrics.alpha_loss[:, 2:]).all()
    init = jax.jit(jax.vmap(functools.partial(sac.init_state, setup)))(keys)
    assert not tree_equal(init.learner.params.actor, state.learner.params.actor)  # gradient steps taken
    assert not tree_equal(init.learner.params.critic_target, state.learner.params.critic_target)
    assert bool(jnp.all(state.learner.params.log_alpha != 0.0))  # autotune moved alpha from exp(0)
    assert not np.allclose(metrics.qf_loss[0, 2:], metrics.qf_loss[1, 2:])  # independent seeds
    # without --normalize-obs the observation statistics stay where they started
    np.testing.assert_array_equal(state.obs_rms.mean, 0.0)
    np.testing.assert_array_equal(state.obs_rms.var, 1.0)


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    """The harness's chunks (the CLI's program) end where make_train's single scan ends."""
    args = tiny_args(total_timesteps=350, num_chunks=3)  # 7 iterations: chunks of 3, the last masks 2
    algo = sac.make_algorithm(args)
    assert (algo.num_iterations, *sac.plan_chunks(algo.num_iterations, args.num_chunks)) == (7, 3, 3)
    key = jax.random.PRNGKey(7)
    final, metrics = jax.jit(sac.make_train(args))(key)
    state, chunk_metrics = run_in_chunks(sac, algo, key, args.num_chunks)
    chunked = jax.tree.map(lambda *xs: np.concatenate(xs), *chunk_metrics)  # [9]
    assert np.isnan(chunked.qf_loss[7:]).all()  # the masked iterations
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(chunked.qf_loss[:7], metrics.qf_loss, rtol=1e-4)


# --- --normalize-obs [SAC-15]: running observation statistics ------------------------------


def test_observation_statistics_merge_to_numpys_mean_and_var():
    """Batches of 7, 1 and 12 observations merged one after another give numpy's mean and
    (population) variance of all 20; normalize maps them to mean 0 and std 1, clips at +-10,
    and is the identity when off (_helpers.check_observation_statistics)."""
    check_observation_statistics(sac)


def test_normalize_obs_keeps_the_statistics_of_every_observation_acted_in():
    """Under jit and vmap over 3 seeds, each seed's statistics are numpy's over the observations
    it acted in, random steps included. 150 steps of 2 envs; learning from step 50 on."""
    check_statistics_of_every_observation_acted_in(sac, tiny_args(num_envs=2, normalize_obs=True))


def test_normalize_obs_normalises_the_batches_the_acting_and_the_evaluation():
    """A gradient step, an env step and the evaluation action with --normalize-obs equal those
    without it on observations normalised by hand (_helpers.check_normalize_obs_paths)."""
    check_normalize_obs_paths(sac, tiny_args(normalize_obs=True), tiny_args(normalize_obs=False))


def test_a_normalized_run_saves_its_statistics(tmp_path):
    """--normalize-obs from the command line: the checkpoint and the saved model hold the
    statistics of the observations acted in, and the saved model evaluates as the run did.
    (That a stopped run resumes them exactly is test_contract.py's resume test.)"""
    check_a_normalized_run_saves_its_statistics(sac, tmp_path)


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_pendulum_learns_with_a_reduced_budget():
    """Reduced budget (the defaults: 50k steps, 256-unit layers): 12k steps,
    learning_starts 1000, 64-unit layers, the other defaults. Seeds 1, 2, 3 (vmapped) each
    evaluate >= -300 (a random policy scores about -1200; docs/sac_jax.md has the measured
    returns). The evaluation is the run harness's, with its keys."""
    args = sac.Flags(total_timesteps=12_000, learning_starts=1000, hidden_size=64)
    algo = sac.make_algorithm(args)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (1, 2, 3)])
    state, _ = jax.jit(jax.vmap(sac.make_train(args)))(keys)

    def evaluate(state_of_seed, key):
        return sac.evaluate_episodes(algo, 32, algo.model(state_of_seed), key).returns

    returns = jax.jit(jax.vmap(evaluate))(state, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    means = np.asarray(returns).mean(axis=1)
    print("deterministic evaluation, seeds 1, 2, 3:", means)
    assert (means >= -300).all(), means
