"""Tests of vibe_rl/pqn_jax.py: the math, the network, probe environments, jit/vmap, chunking,
learning. The command-line contract (bad input, resume, run directory) is tests/test_contract.py."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import ConstantRewardProbe, CountingProbe, load_script, run_in_chunks, tree_equal

pqn_jax = load_script("pqn_jax")

TINY = dict(num_envs=4, num_steps=8, total_timesteps=160, num_minibatches=2, update_epochs=2)


# The slow learning test's budget: reduced from the defaults' 500k steps (see its docstring).
REDUCED = dict(total_timesteps=100_000)


def tiny_args(**overrides) -> pqn_jax.Args:
    return pqn_jax.Flags(**{**TINY, **overrides})


def probe_setup(env, args: pqn_jax.Args) -> pqn_jax.Setup:
    """PQN on a probe environment (not registered in gymnax): build for CartPole, swap the env."""
    spec = pqn_jax.env_spec(env, env.default_params)
    q_network = pqn_jax.QNetwork(spec.action_dim, spec.obs_shape, args.hidden_size, "mlp")
    return pqn_jax.build_setup(args)._replace(spec=spec, q_network=q_network)


def train_setup(setup: pqn_jax.Setup, key: jax.Array):
    """What make_train returns, for a Setup built here (e.g. on a probe env)."""
    indices = jnp.arange(setup.sizes.num_iterations)
    return jax.jit(
        lambda k: jax.lax.scan(
            lambda s, i: pqn_jax.iteration(setup, s, i), pqn_jax.init_state(setup, k), indices
        )
    )(key)


# --- math against hand-computed values -------------------------------------------------


def test_q_lambda_returns_hand_computed_with_termination_and_truncation():
    # gamma 0.9, lambda 0.8; values[t] = max_a Q(obs[t], a). Env 0: step 1 terminates, step 2
    # is truncated (bootstrap from max_a Q(final_obs) = 10). Env 1: the same, but step 1 is
    # terminated AND truncated: termination wins, so its final value 8 must be ignored.
    rewards = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    values = jnp.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5], [2.0, 2.0]])
    terminated = jnp.array([[0, 0], [1, 1], [0, 0], [0, 0]], bool)
    truncated = jnp.array([[0, 0], [0, 1], [1, 1], [0, 0]], bool)
    final_values = jnp.array([[7.0, 7.0], [8.0, 8.0], [10.0, 10.0], [9.0, 9.0]])
    last_value = jnp.array([3.0, 3.0])
    returns = pqn_jax.q_lambda_returns(
        rewards, values, terminated, truncated, final_values, last_value, 0.9, 0.8
    )
    # t=3: the rollout's last step: 4 + 0.9 * 3 = 6.7 (one step, from last_value)
    # t=2: truncated: 3 + 0.9 * 10 = 12 (from V(final_obs)); the recursion stops
    # t=1: terminated: 2 (no bootstrap)
    # t=0: 1 + 0.9 * ((1 - 0.8) * V[1] + 0.8 * G[1]) = 1 + 0.9 * (0.2 * 1.0 + 0.8 * 2) = 2.62
    expected = np.array([2.62, 2.0, 12.0, 6.7])
    np.testing.assert_allclose(returns, np.stack([expected, expected], 1), rtol=1e-6)


def test_q_lambda_extremes_are_one_step_q_learning_and_the_discounted_sum():
    key_r, key_v = jax.random.split(jax.random.PRNGKey(0))
    rewards, values = jax.random.normal(key_r, (6, 3)), jax.random.normal(key_v, (6, 3))
    no_end = jnp.zeros((6, 3), bool)
    last_value, gamma = jnp.array([0.5, -1.0, 2.0]), 0.9
    next_values = jnp.concatenate([values[1:], last_value[None]])

    def returns(q_lambda):
        return pqn_jax.q_lambda_returns(rewards, values, no_end, no_end, values, last_value, gamma, q_lambda)

    np.testing.assert_allclose(returns(0.0), rewards + gamma * next_values, rtol=1e-5)  # r + gamma max Q'
    discounts = gamma ** jnp.arange(6)[:, None]  # lambda 1: the discounted sum of rewards to the end
    expected_0 = (rewards * discounts).sum(0) + gamma**6 * last_value
    np.testing.assert_allclose(returns(1.0)[0], expected_0, rtol=1e-5)


def test_linear_schedule():
    values = [float(pqn_jax.linear_schedule(1.0, 0.1, 100.0, jnp.asarray(s))) for s in (0, 50, 100, 500)]
    np.testing.assert_allclose(values, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)
    assert float(pqn_jax.linear_schedule(1.0, 0.1, 0.0, jnp.asarray(0))) == pytest.approx(0.1)


def test_td_loss_hand_computed():
    loss = pqn_jax.td_loss_fn(jnp.array([1.0, 2.0, 3.0]), jnp.array([1.0, 0.0, 5.0]))
    assert float(loss) == pytest.approx(0.5 * (0 + 4 + 4) / 3)


# --- the network -----------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "network"), [("CartPole-v1", "mlp"), ("Breakout-MinAtar", "cnn")])
def test_q_network_shapes_under_jit_and_vmap(env_id, network):
    setup = pqn_jax.build_setup(tiny_args(env_id=env_id, hidden_size=32))  # --network auto
    assert setup.q_network.network == network
    spec, obs_dim = setup.spec, math.prod(setup.spec.obs_shape)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = jax.jit(jax.vmap(lambda k: setup.q_network.init(k, jnp.zeros((1, obs_dim)))))(keys)
    obs = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (3, 5, obs_dim)).astype(jnp.float32)
    q_values = jax.jit(jax.vmap(setup.q_network.apply))(params, obs)
    assert q_values.shape == (3, 5, spec.action_dim)
    layers = params["params"]
    # LayerNorm after each of the two hidden layers; 3 seeds on the leading axis
    assert layers["LayerNorm_0"]["scale"].shape == (3, 16 if network == "cnn" else 32)
    assert layers["LayerNorm_1"]["scale"].shape == (3, 32)
    if network == "cnn":  # the 3x3 conv (Conv3x3, im2col) on C = 4 channels as a [9C, 16] kernel
        assert layers["Conv3x3_0"]["Dense_0"]["kernel"].shape == (3, 36, 16)
    assert not np.allclose(q_values[0], q_values[1])  # seeds initialise differently


def test_cnn_torso_is_a_3x3_valid_convolution_with_layer_norms():
    class Torso(nn.Module):
        @nn.compact
        def __call__(self, obs):
            return pqn_jax.cnn_torso(obs, (10, 10, 4), 8)

    obs = jax.random.bernoulli(jax.random.PRNGKey(0), 0.3, (5, 400)).astype(jnp.float32)
    params = Torso().init(jax.random.PRNGKey(1), obs)["params"]
    conv, dense = params["Conv3x3_0"]["Dense_0"], params["Dense_0"]

    def layer_norm(x):  # flax's LayerNorm at init: scale 1, offset 0, epsilon 1e-6
        return (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-6)

    image = obs.reshape(5, 10, 10, 4)
    kernel = conv["kernel"].reshape(3, 3, 4, 16)  # [9C, 16] -> [H, W, C_in, C_out]
    layout = ("NHWC", "HWIO", "NHWC")
    x = jax.lax.conv_general_dilated(image, kernel, (1, 1), "VALID", dimension_numbers=layout)
    x = jax.nn.relu(layer_norm(x + conv["bias"])).reshape(5, -1)  # per pixel, over its 16 channels
    expected = jax.nn.relu(layer_norm(x @ dense["kernel"] + dense["bias"]))
    np.testing.assert_allclose(Torso().apply({"params": params}, obs), expected, rtol=1e-4, atol=1e-4)


def test_continuous_env_is_refused_pointing_to_sac():
    with pytest.raises(pqn_jax.ArgsError, match="sac_jax.py"):
        pqn_jax.build_setup(tiny_args(env_id="Pendulum-v1"))


# --- the rollout and time limits on probe environments ---------------------------------


def test_rollout_stores_the_real_final_observation_at_a_time_limit():
    """CountingProbe observes [t]; truncated after 5 steps. The transition keeps [5], the next
    observation is the reset one, [0]."""
    setup = probe_setup(CountingProbe(), tiny_args(num_envs=2, num_steps=12))
    state = pqn_jax.init_state(setup, jax.random.PRNGKey(0))
    _, traj = pqn_jax.rollout(setup, state, jnp.asarray(0))
    assert traj.truncated[:, 0].tolist() == [t in (4, 9) for t in range(12)]
    assert not traj.terminated.any()
    np.testing.assert_array_equal(traj.obs[:6, 0, 0], [0, 1, 2, 3, 4, 0])
    np.testing.assert_array_equal(traj.final_obs[4, :, 0], [5, 5])


def test_q_learns_through_a_time_limit():
    """Constant reward 1, only time-limit ends (5 steps), gamma 0.5: Q must reach 1/(1-gamma) = 2
    for both actions; treating truncation as termination would give about 1.6."""
    args = tiny_args(
        num_envs=8, num_steps=16, total_timesteps=128 * 150, gamma=0.5, learning_rate=1e-2,
        anneal_lr=False, hidden_size=16, num_minibatches=4, reward_scale=1.0,
    )  # fmt: skip
    setup = probe_setup(ConstantRewardProbe(), args)
    state, _ = train_setup(setup, jax.random.PRNGKey(0))
    q_values = setup.q_network.apply(state.params, jnp.ones((1, 1)))
    np.testing.assert_allclose(q_values, [[2.0, 2.0]], atol=0.05)


def test_q_does_not_bootstrap_through_a_termination():
    """CountingProbe terminating at step 3, reward 1, gamma 0.5: Q([0]) = 1.75, Q([1]) = 1.5,
    Q([2]) = 1 for both actions (bootstrapping through the end would add 0.5 * Q([3]))."""
    args = tiny_args(
        num_envs=8, num_steps=16, total_timesteps=128 * 150, gamma=0.5, learning_rate=1e-2,
        anneal_lr=False, hidden_size=16, num_minibatches=4, reward_scale=1.0,
    )  # fmt: skip
    setup = probe_setup(CountingProbe(terminate_at=3), args)
    state, _ = train_setup(setup, jax.random.PRNGKey(0))
    q_values = setup.q_network.apply(state.params, jnp.array([[0.0], [1.0], [2.0]]))
    np.testing.assert_allclose(q_values, [[1.75, 1.75], [1.5, 1.5], [1.0, 1.0]], atol=0.05)


# --- the whole training: jit and vmap, and chunked -------------------------------------


def test_make_train_under_jit_and_vmap_takes_gradient_steps():
    args = tiny_args()
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(pqn_jax.make_train(args)))(keys)
    setup = pqn_jax.build_setup(args)
    num_iterations = args.total_timesteps // (args.num_envs * args.num_steps)
    assert state.obs.shape == (3, args.num_envs, math.prod(setup.spec.obs_shape))
    assert metrics.td_loss.shape == (3, num_iterations)
    assert bool(jnp.all(jnp.isfinite(metrics.td_loss))) and bool(jnp.all(metrics.grad_norm > 0))
    init = jax.jit(jax.vmap(lambda k: pqn_jax.init_state(setup, k)))(keys)
    assert not tree_equal(init.params, state.params)  # at least one gradient step was taken
    assert not np.allclose(metrics.td_loss[0], metrics.td_loss[1])  # seeds are independent runs
    # epsilon at the first rollout's last step: 28 of the 32 exploration steps done
    np.testing.assert_allclose(metrics.epsilon[0, 0], 1 + (args.end_e - 1) * 28 / 32, rtol=1e-5)


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    args = tiny_args(total_timesteps=160)  # 5 iterations -> chunks of 2, the last skips one
    algo = pqn_jax.make_algorithm(args)
    key = jax.random.PRNGKey(7)
    final, _ = jax.jit(pqn_jax.make_train(args))(key)
    per_chunk, num_chunks = pqn_jax.plan_chunks(algo.num_iterations, 3)
    assert (per_chunk, num_chunks) == (2, 3)
    state, metrics = run_in_chunks(pqn_jax, algo, key, 3)
    assert bool(jnp.isnan(metrics[-1].td_loss[-1])) and bool(jnp.isfinite(metrics[-1].td_loss[0]))
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_cartpole_learns_with_a_reduced_budget():
    """A reduced budget (REDUCED, not the 500k-step defaults that solve CartPole): seeds 1, 2, 3
    vmapped must each reach a greedy evaluation of >= 150 (a random policy gets about 22)."""
    args = pqn_jax.Flags(**REDUCED)
    algo = pqn_jax.make_algorithm(args)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (1, 2, 3)])
    state, _ = jax.jit(jax.vmap(pqn_jax.make_train(args)))(keys)
    evaluate = jax.vmap(lambda s, k: pqn_jax.evaluate_episodes(algo, 16, algo.model(s), k))
    result = jax.jit(evaluate)(state, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    means = np.asarray(result.returns).mean(axis=1)
    assert (means >= 150).all(), means
