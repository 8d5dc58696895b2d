"""Tests of vibe_rl/dqn_jax.py: the replay buffer, the math, time limits on probe envs, the CNN,
shapes under jit and vmap, chunks, the logged iterations, learning. The command-line contract (bad
input, resume, run directory) is tested for every script in test_contract.py."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    NO_LEARNING,
    ConstantRewardProbe,
    CountingProbe,
    run_in_chunks,
    tree_equal,
)

from vibe_rl import dqn_jax as dqn

# A tiny budget that still takes gradient steps: 400 env steps (4 iterations of 25 steps of 4 envs),
# learning from env step 100.
TINY = dict(
    num_envs=4,
    total_timesteps=400,
    buffer_size=200,
    batch_size=16,
    learning_starts=100,
    train_frequency=4,
    target_network_frequency=40,
    log_frequency=100,
    num_chunks=2,
)


def tiny_args(**overrides) -> dqn.Args:
    return dqn.Flags(**{**TINY, **overrides})


def probe_setup(env, **overrides) -> dqn.Setup:
    """DQN (two actions, an MLP) on a probe env with observations [1]."""
    setup = dqn.build_setup(tiny_args(**overrides))
    return setup._replace(spec=dqn.env_spec(env, env.default_params), obs_dtype=jnp.float32)


def train_probe(setup: dqn.Setup, key: jax.Array) -> dqn.RunnerState:
    iterations = jnp.arange(setup.sizes.num_iterations)
    state, _ = jax.lax.scan(functools.partial(dqn.iteration, setup), dqn.init_state(setup, key), iterations)
    return state


def transitions(values: list[float]) -> dqn.Transition:
    """N transitions whose every field is tagged by its value (obs = [v], action = v, ...)."""
    v = jnp.asarray(values, jnp.float32)
    return dqn.Transition(
        obs=v[:, None], action=v.astype(jnp.int32), reward=v, terminated=v > 100, next_obs=v[:, None] + 0.5
    )


# --- the replay buffer ---------------------------------------------------------------


def test_buffer_insert_and_wrap_around():
    buffer = dqn.buffer_init(5, (1,), jnp.float32)
    buffer = dqn.buffer_add(buffer, transitions([1, 2, 3]))
    assert int(buffer.position) == 3 and int(buffer.size) == 3
    buffer = dqn.buffer_add(buffer, transitions([4, 5, 6]))  # slots 3, 4, then 0 (wraps)
    assert int(buffer.position) == 1 and int(buffer.size) == 5
    np.testing.assert_array_equal(buffer.data.obs[:, 0], [6, 2, 3, 4, 5])
    np.testing.assert_array_equal(buffer.data.action, [6, 2, 3, 4, 5])
    np.testing.assert_array_equal(buffer.data.next_obs[:, 0], [6.5, 2.5, 3.5, 4.5, 5.5])
    buffer = dqn.buffer_add(buffer, transitions([7, 8, 9, 10, 11]))  # a full turn
    assert int(buffer.position) == 1 and int(buffer.size) == 5
    np.testing.assert_array_equal(buffer.data.reward, [11, 7, 8, 9, 10])


def test_buffer_samples_only_filled_slots_uniformly():
    buffer = dqn.buffer_init(100, (1,), jnp.float32)
    buffer = dqn.buffer_add(buffer, transitions([1, 2, 3]))  # 97 slots still zero
    batch = dqn.buffer_sample(buffer, jax.random.PRNGKey(0), 3000)
    values, counts = np.unique(np.asarray(batch.obs[:, 0]), return_counts=True)
    np.testing.assert_array_equal(values, [1, 2, 3])
    np.testing.assert_allclose(counts / 3000, 1 / 3, atol=0.05)
    # a sampled transition stays whole: every field comes from the same slot
    np.testing.assert_array_equal(batch.action, batch.obs[:, 0].astype(int))
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.obs[:, 0] + 0.5)


def test_buffer_memory_formula_and_uint8_minatar_observations():
    minatar = dqn.build_setup(dqn.Flags(env_id="Breakout-MinAtar"))
    assert minatar.obs_dtype == jnp.uint8 and minatar.spec.obs_shape == (10, 10, 4)
    buffer = dqn.buffer_init(1000, minatar.spec.obs_shape, minatar.obs_dtype)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(buffer)) - 8  # minus position and size
    assert nbytes == 1000 * (2 * 400 + 4 + 4 + 1)  # C * (2 * obs_bytes + action + reward + flag)
    cartpole = dqn.build_setup(dqn.Flags(env_id="CartPole-v1"))
    buffer = dqn.buffer_init(10, cartpole.spec.obs_shape, cartpole.obs_dtype)
    assert sum(x.nbytes for x in jax.tree.leaves(buffer)) - 8 == 10 * 41


# --- math ------------------------------------------------------------------------------


def test_td_target_hand_computed():
    reward = jnp.array([1.0, 2.0, 3.0])
    terminated = jnp.array([False, True, False])
    next_q_target = jnp.array([[1.0, 4.0], [10.0, 20.0], [5.0, 3.0]])
    next_q_online = jnp.array([[9.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    # DQN: r + 0.5 * max_a Q_target; the terminated step does not bootstrap
    target = dqn.td_target(reward, terminated, next_q_target, next_q_online, 0.5, False)
    np.testing.assert_allclose(target, [1 + 0.5 * 4, 2.0, 3 + 0.5 * 5])
    # Double DQN: the online net picks a' (0, -, 1), the target net values it
    target = dqn.td_target(reward, terminated, next_q_target, next_q_online, 0.5, True)
    np.testing.assert_allclose(target, [1 + 0.5 * 1, 2.0, 3 + 0.5 * 3])


def test_td_losses():
    q, target = jnp.array([0.0, 0.0]), jnp.array([0.5, 3.0])
    np.testing.assert_allclose(dqn.td_loss(q, target, "mse"), (0.25 + 9) / 2)
    np.testing.assert_allclose(dqn.td_loss(q, target, "huber"), (0.125 + 2.5) / 2)


def test_epsilon_schedule_is_linear_then_flat():
    eps = [float(dqn.linear_schedule(1.0, 0.05, 1000, jnp.asarray(t))) for t in (0, 500, 1000, 5000)]
    np.testing.assert_allclose(eps, [1.0, 0.525, 0.05, 0.05], rtol=1e-6)
    # through the training: see test_chunked_run_equals_single_program


def test_epsilon_greedy_extremes():
    q = jnp.array([[0.0, 1.0, 0.0]] * 2000)
    greedy = dqn.epsilon_greedy(jax.random.PRNGKey(0), q, jnp.asarray(0.0))
    assert (np.asarray(greedy) == 1).all()
    random = np.asarray(dqn.epsilon_greedy(jax.random.PRNGKey(1), q, jnp.asarray(1.0)))
    np.testing.assert_allclose(np.bincount(random, minlength=3) / 2000, 1 / 3, atol=0.05)


def test_polyak_and_hard_target_update():
    online, target = {"w": jnp.array([1.0])}, {"w": jnp.array([0.0])}
    np.testing.assert_allclose(dqn.update_target(online, target, 1.0)["w"], [1.0])
    np.testing.assert_allclose(dqn.update_target(online, target, 0.1)["w"], [0.1])


# --- time limits: truncation bootstraps, termination does not ------------------------


@pytest.mark.parametrize(
    ("terminate_at", "obs", "next_obs", "terminated"),
    [
        (None, [0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 5, 1], [0, 0, 0, 0, 0, 0]),  # time limit 5 truncates
        (3, [0, 1, 2, 0, 1, 2], [1, 2, 3, 1, 2, 3], [0, 0, 1, 0, 0, 1]),  # step 3 terminates
    ],
)
def test_step_stores_the_real_final_observation(terminate_at, obs, next_obs, terminated):
    """CountingProbe, obs [t]: the step that ends an episode stores next_obs [end] (the
    real final observation, not the reset [0]); only a termination is stored as one."""
    setup = probe_setup(CountingProbe(terminate_at), num_envs=1, buffer_size=20, **NO_LEARNING)
    state = dqn.init_state(setup, jax.random.PRNGKey(0))
    state, _ = jax.lax.scan(functools.partial(dqn.step, setup), state, jnp.arange(6))
    np.testing.assert_array_equal(state.buffer.data.obs[:6, 0], obs)
    np.testing.assert_array_equal(state.buffer.data.next_obs[:6, 0], next_obs)
    np.testing.assert_array_equal(state.buffer.data.terminated[:6], np.array(terminated, bool))


def test_q_bootstraps_through_time_limit():
    """Constant reward 1, only time-limit ends: Q must reach 1/(1-gamma) = 2, not ~1.6."""
    setup = probe_setup(
        ConstantRewardProbe(),
        total_timesteps=6000,
        gamma=0.5,
        learning_rate=3e-3,
        buffer_size=1000,
        batch_size=64,
        learning_starts=200,
        target_network_frequency=100,
        log_frequency=1000,
    )
    state = jax.jit(functools.partial(train_probe, setup))(jax.random.PRNGKey(0))
    q = setup.network.apply(state.params, jnp.ones((1, 1)))
    np.testing.assert_allclose(q, [[2.0, 2.0]], atol=0.05)


# --- the network -----------------------------------------------------------------------


def test_cnn_is_the_minatar_3x3_valid_convolution_with_its_initial_values():
    """The harness's Conv3x3 is nn.Conv(16, (3, 3), padding="VALID") with the kernel [3, 3, C, 16]
    held as [9C, 16]; the CNN is it, ReLU, a dense 128, ReLU, the head. Its kernel starts as
    nn.Conv's would: LeCun normal over the fan-in 9C, zero bias."""
    obs = jax.random.bernoulli(jax.random.PRNGKey(0), 0.3, (5, 10, 10, 4)).astype(jnp.float32)
    conv = nn.Conv(16, (3, 3), padding="VALID")

    def as_conv(patch_params):  # Conv3x3's parameters as nn.Conv's
        kernel = patch_params["kernel"].reshape(3, 3, 4, 16)  # [9C, 16] -> [H, W, C_in, C_out]
        return {"params": {"kernel": kernel, "bias": patch_params["bias"]}}

    conv3x3 = dqn.Conv3x3(16)
    variables = conv3x3.init(jax.random.PRNGKey(1), obs)
    np.testing.assert_allclose(
        conv3x3.apply(variables, obs),
        conv.apply(as_conv(variables["params"]["Dense_0"]), obs),
        rtol=1e-5,
        atol=1e-5,
    )

    net = dqn.QNetwork(num_actions=3, cnn=True)
    params = net.init(jax.random.PRNGKey(1), obs)["params"]
    patches, dense, head = params["Conv3x3_0"]["Dense_0"], params["Dense_0"], params["Dense_1"]
    x = jax.nn.relu(conv.apply(as_conv(patches), obs)).reshape(5, -1)  # [5, 8 * 8 * 16]
    expected = jax.nn.relu(x @ dense["kernel"] + dense["bias"]) @ head["kernel"] + head["bias"]
    np.testing.assert_allclose(net.apply({"params": params}, obs), expected, rtol=1e-5, atol=1e-5)
    assert patches["kernel"].shape == (36, 16) and not np.asarray(patches["bias"]).any()
    np.testing.assert_allclose(np.std(patches["kernel"]), 1 / np.sqrt(36), rtol=0.15)


# --- shapes under jit and vmap; chunks equal the single program ------------------------


@pytest.mark.parametrize(("env_id", "cnn"), [("CartPole-v1", False), ("Breakout-MinAtar", True)])
def test_train_shapes_under_jit_and_vmap(env_id, cnn):
    args = tiny_args(env_id=env_id, double_dqn=cnn, loss="huber")
    setup = dqn.build_setup(args)
    spec, sizes = setup.spec, setup.sizes
    assert setup.network.cnn == cnn  # --network auto picks by the observation's shape
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    state, metrics = jax.jit(jax.vmap(dqn.make_train(args)))(keys)
    assert state.obs.shape == (2, args.num_envs, *spec.obs_shape)
    assert state.buffer.data.obs.shape == (2, args.buffer_size, *spec.obs_shape)
    assert state.buffer.data.obs.dtype == setup.obs_dtype
    assert metrics.td_loss.shape == (2, sizes.num_iterations) == (2, 4)
    assert state.buffer.size.tolist() == [args.buffer_size] * 2
    # gradient steps at global steps 104, 108, ..., 400: 75 of them, none in the first iteration
    np.testing.assert_array_equal(metrics.gradient_steps, [[0, 25, 25, 25]] * 2)
    assert bool(jnp.all(jnp.isnan(metrics.td_loss[:, 0]))) and bool(
        jnp.all(jnp.isfinite(metrics.td_loss[:, 1:]))
    )
    init = jax.jit(jax.vmap(functools.partial(dqn.init_state, setup)))(keys)
    assert not tree_equal(init.params, state.params)
    assert not tree_equal(init.target_params, state.target_params)  # updated at 120, 160, ...
    assert not np.allclose(metrics.td_loss[0, 1:], metrics.td_loss[1, 1:])  # independent seeds
    if cnn:  # 2 seeds x the 3x3 conv on C = 4 channels as a [9C, 16] kernel
        assert state.params["params"]["Conv3x3_0"]["Dense_0"]["kernel"].shape == (2, 36, 16)


def test_chunked_run_equals_single_program():
    # 5 iterations in chunks of 2: the last chunk runs one and skips one; epsilon decays over 250 steps
    args = tiny_args(total_timesteps=500, num_chunks=3, start_e=1.0, end_e=0.2, exploration_fraction=0.5)
    algo = dqn.make_algorithm(args)
    iterations_per_chunk, num_chunks = dqn.plan_chunks(algo.num_iterations, args.num_chunks)
    assert (algo.num_iterations, iterations_per_chunk, num_chunks) == (5, 2, 3)
    key = jax.random.PRNGKey(7)
    final, metrics = jax.jit(dqn.make_train(args))(key)
    # the logged epsilon is the one of each iteration's last step (acting after 96, 196, ... env steps)
    expected_epsilon = [1 - 0.8 * 96 / 250, 1 - 0.8 * 196 / 250, 0.2, 0.2, 0.2]
    np.testing.assert_allclose(metrics.epsilon, expected_epsilon, rtol=1e-6)
    state, metrics = run_in_chunks(dqn, algo, key, args.num_chunks)
    chunk_metrics = metrics[-1]
    assert bool(jnp.isnan(chunk_metrics.td_loss[-1]))  # the skipped iteration
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):  # buffer included
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- the logged iterations -------------------------------------------------------------


def test_iterations_tile_the_run_and_a_prime_budget_gets_long_iterations():
    # 3M steps of 16 envs = 187,500 steps, log every 1000 env steps = 62 steps: 60 divides
    assert dqn.iteration_length(187_500, 62) == 60
    assert dqn.iteration_length(500_000, 1000) == 1000  # the default run: 500 points
    assert dqn.iteration_length(20_480, 1000) == 640
    # a prime number of steps has no divisor but 1: iterations of 1000, the last 7 steps dropped
    sizes = dqn.build_setup(dqn.Flags(total_timesteps=10_007, learning_starts=0)).sizes
    assert sizes == dqn.Sizes(steps_per_iteration=1000, num_iterations=10, total_steps=10_000)
    for n in range(1, 2000):  # the rule, as a property
        for cap in (1, 2, 7, 100, 1000, 5000):
            size, reach = dqn.iteration_length(n, cap), min(cap, n)
            assert 2 * size >= reach and size <= reach, (n, cap, size)
            assert n % size == 0 or size == reach, (n, cap, size)  # tiles the run, or is the cap


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_cartpole_learns_with_a_reduced_budget():
    """A reduced budget (100k steps, 4 envs, exploration over 20%, lr 1e-3) instead of the
    500k default, so it runs in about a minute: seeds 1, 2, 3 each evaluate >= 150, far
    above a random policy (~22). Measured: 499, 335, 490 (deterministic on CPU, 2026-11-25).
    The full default config's results: docs/dqn_jax.md."""
    args = dqn.Flags(
        total_timesteps=100_000,
        num_envs=4,
        train_frequency=4,
        target_network_frequency=500 - 500 % 4,
        learning_starts=5000,
        exploration_fraction=0.2,
        learning_rate=1e-3,
    )
    algo = dqn.make_algorithm(args)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (1, 2, 3)])
    state, _ = jax.jit(jax.vmap(dqn.make_train(args)))(keys)
    evaluate = jax.jit(jax.vmap(functools.partial(dqn.evaluate_episodes, algo, 32)))
    result = evaluate(algo.model(state), jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    means = np.asarray(result.returns).mean(axis=1)
    assert (means >= 150).all(), means
