"""Tests of vibe_rl/rainbow_jax.py, its own: the n-step return across a termination and a truncation, the
prioritized sampler (a chi-square test of its draws) and its importance weights, each component's flag
changing the program, a stopped and resumed run with non-uniform priorities, chunks, learning. The
categorical projection is tested beside C51's (tests/test_c51.py); the command-line contract in
tests/test_contract.py; the learning tests (`-m slow`) on CartPole-v1."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    assert_chunks_equal_one_program,
    interrupt_after_compiling,
    load_script,
    run_script,
    start_script,
    tree_equal,
)
from test_contract import read_state

rainbow = load_script("rainbow_jax")

# 400 env steps (4 iterations of 25 steps of 4 envs), learning from env step 100
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
    n_atoms=11,
    v_min=-10.0,
    v_max=10.0,
)


def tiny_args(**overrides):
    return rainbow.Flags(**{**TINY, **overrides})


# --- the n-step return ---------------------------------------------------------------------


def test_the_n_step_return_stops_at_a_termination_and_bootstraps_through_a_truncation():
    """Windows of n = 3 steps, gamma 0.5, rewards 1, 2, 4 (by hand): no end: 1 + 1 + 1 = 3, discount 0.125,
    bootstrap from step 2; terminated at step 1: 1 + 1 = 2, no bootstrap; truncated at step 1: the same
    return, bootstrapped with 0.25 from step 1's final observation; terminated at step 0: 1 alone."""
    reward = jnp.array([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [4.0, 4.0, 4.0, 4.0]])  # [n, N]
    terminated = jnp.array([[False, False, False, True], [False, True, False, False], [False] * 4])
    truncated = jnp.array([[False] * 4, [False, False, True, False], [False] * 4])
    returns, discount, last = rainbow.n_step_return(reward, terminated, truncated, 0.5)
    np.testing.assert_allclose(returns, [3.0, 2.0, 2.0, 1.0])
    np.testing.assert_allclose(discount, [0.125, 0.0, 0.25, 0.0])
    np.testing.assert_array_equal(last, [2, 1, 1, 0])


def test_a_stored_transition_bootstraps_from_the_real_final_observation():
    """Through `step`: one env, n = 3, an episode cut by its time limit (CartPole's truncation made to come at
    step 2): the transition of step 1 sums its 2 rewards and stores the final observation, not the reset."""
    args = tiny_args(num_envs=1, n_step=3, learning_starts=1000, total_timesteps=2000, gamma=0.5)
    setup = rainbow.build_setup(args)
    setup = setup._replace(spec=setup.spec._replace(params=setup.spec.params.replace(max_steps_in_episode=3)))
    state = rainbow.init_state(setup, jax.random.PRNGKey(0))
    state, _ = jax.lax.scan(functools.partial(rainbow.step, setup), state, jnp.arange(3))
    stored = jax.tree.map(lambda x: x[0], state.buffer.data)  # the first transition: steps 0, 1, 2
    np.testing.assert_allclose(stored.reward, 1 + 0.5 + 0.25)  # CartPole's reward 1 a step
    np.testing.assert_allclose(stored.discount, 0.125)  # truncated at step 2: bootstrapped
    assert not np.allclose(stored.next_obs, state.obs[0])  # the final observation, not the new episode's


def test_learning_starts_when_the_longest_n_step_window_it_allows_fills():
    """--n-step at its bound, the first gradient step --learning-starts allows divided by --num-envs (the
    window fills by then; one more is refused): the first gradient step is taken at that env step, 12."""
    args = tiny_args(num_envs=2, learning_starts=10, train_frequency=4, n_step=6, total_timesteps=40)
    setup = rainbow.build_setup(args)
    state = rainbow.init_state(setup, jax.random.PRNGKey(0))
    _, info = jax.jit(lambda s: jax.lax.scan(functools.partial(rainbow.step, setup), s, jnp.arange(8)))(state)
    env_steps = 2 * np.arange(1, 9)  # [8] global_step after each step
    assert env_steps[np.isfinite(np.asarray(info.loss))].tolist() == [12, 16], np.asarray(info.loss)
    with pytest.raises(rainbow.ArgsError, match="--n-step 7 fills its window at env step 14"):
        rainbow.build_setup(tiny_args(num_envs=2, learning_starts=10, train_frequency=4, n_step=7))


# --- prioritized replay ---------------------------------------------------------------------


def test_the_sum_tree_draws_rows_in_proportion_to_their_masses():
    """A chi-square test over 64,000 draws of 10 rows with masses 1..10 (a buffer of capacity 16, 10 filled):
    the statistic stays below the 0.999 quantile of chi-square with 9 degrees of freedom (27.88). Uniform
    draws, or draws in proportion to the priorities rather than their masses, would exceed it by far."""
    masses = jnp.arange(1.0, 11.0)  # [10]
    tree = rainbow.tree_set(rainbow.tree_init(16), jnp.arange(10), masses)
    assert float(tree.nodes[1]) == 55.0  # the root: the total mass
    draw = jax.jit(jax.vmap(lambda key: rainbow.tree_sample(tree, key, 32)))
    rows = np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), 2000))).ravel()  # [64000]
    counts = np.bincount(rows, minlength=16)
    assert counts[10:].sum() == 0  # the empty rows are never drawn
    expected = len(rows) * np.asarray(masses) / 55.0
    statistic = ((counts[:10] - expected) ** 2 / expected).sum()
    assert statistic < 27.88, (statistic, counts)


def test_sampling_probabilities_and_importance_weights():
    """buffer_sample's probabilities are each row's mass over the total; the importance weights are
    (size P(i))^-beta over their largest, as computed directly."""
    buffer = rainbow.buffer_init(8, (2,), jnp.float32)
    batch = rainbow.Transition(
        jnp.zeros((4, 2)), jnp.zeros(4, jnp.int32), jnp.zeros(4), jnp.zeros(4), jnp.zeros((4, 2))
    )
    buffer = rainbow.buffer_add(buffer, batch, 0.5)
    priorities = jnp.array([1.0, 4.0, 9.0, 16.0])
    buffer = buffer._replace(tree=rainbow.tree_set(buffer.tree, jnp.arange(4), priorities**0.5))
    rows, probability = rainbow.buffer_sample(buffer, jax.random.PRNGKey(3), 16, prioritized=True)
    np.testing.assert_allclose(
        probability, (np.asarray(priorities) ** 0.5 / 10.0)[np.asarray(rows)], rtol=1e-6
    )
    weights = rainbow.importance_weights(probability, buffer.size, 0.4)
    direct = (4 * np.asarray(probability)) ** -0.4
    np.testing.assert_allclose(weights, direct / direct.max(), rtol=1e-6)
    _, uniform = rainbow.buffer_sample(buffer, jax.random.PRNGKey(3), 16, prioritized=False)
    np.testing.assert_allclose(uniform, 0.25)


def test_the_largest_priority_exponent_keeps_the_smallest_priority_drawable():
    """--priority-exponent's bound: the floor priority raised to it, in float32 as gradient_step computes it
    (XLA flushes numbers below the smallest normal to 0), is a mass above 0; a little above, it is 0."""
    mass = jax.jit(lambda alpha: (jnp.zeros(()) + rainbow.PRIORITY_FLOOR) ** alpha)
    assert mass(rainbow.MAX_PRIORITY_EXPONENT) > 0 and mass(6.4) == 0
    with pytest.raises(rainbow.ArgsError, match="--priority-exponent 6.31: at most 6.3"):
        rainbow.build_setup(tiny_args(priority_exponent=6.31))


def test_new_transitions_enter_at_the_largest_priority():
    buffer = rainbow.buffer_init(8, (1,), jnp.float32)._replace(max_priority=jnp.asarray(3.0))
    batch = rainbow.Transition(
        jnp.zeros((2, 1)), jnp.zeros(2, jnp.int32), jnp.zeros(2), jnp.zeros(2), jnp.zeros((2, 1))
    )
    buffer = rainbow.buffer_add(buffer, batch, 0.5)
    leaves = buffer.tree.nodes[8:]
    np.testing.assert_allclose(leaves[:2], 3.0**0.5)
    np.testing.assert_allclose(buffer.tree.nodes[1], 2 * 3.0**0.5)


# --- each component's flag changes the program ----------------------------------------------


def one_gradient_step(**flags):
    """(setup, the state after 96 env steps, the gradient step's (state, loss, q) on it)."""
    default = tiny_args()
    changed = {name: value for name, value in flags.items() if getattr(default, name) != value}
    return compiled_gradient_step(tuple(sorted(changed.items())))  # a flag at its default: the same program


@functools.cache  # several tests take the same flags' step: compiled once per worker
def compiled_gradient_step(flags: tuple) -> tuple:
    setup = rainbow.build_setup(tiny_args(**dict(flags)))

    def run(key):
        state = rainbow.init_state(setup, key)
        state, _ = jax.lax.scan(functools.partial(rainbow.step, setup), state, jnp.arange(24))  # 96 env steps
        return state, rainbow.gradient_step(setup, state, jax.random.PRNGKey(1), jnp.int32(100))

    return setup, *jax.jit(run)(jax.random.PRNGKey(0))


def test_no_distributional_takes_the_huber_loss_of_q():
    setup, state, (_, loss, _) = one_gradient_step(distributional=False, prioritized=False, noisy=False)
    assert setup.network.n_atoms == 1
    picked, _ = rainbow.buffer_sample(state.buffer, jax.random.split(jax.random.PRNGKey(1), 4)[0], 16, False)
    batch = jax.tree.map(lambda x: x[picked], state.buffer.data)
    rows = jnp.arange(16)
    next_action = jnp.argmax(rainbow.q_values(setup, state.params, batch.next_obs), -1)  # Double DQN's choice
    target = (
        batch.reward
        + batch.discount * rainbow.q_values(setup, state.target_params, batch.next_obs)[rows, next_action]
    )
    taken = rainbow.q_values(setup, state.params, batch.obs)[rows, batch.action]
    np.testing.assert_allclose(loss, np.mean(np.asarray(rainbow.huber(taken - target))), rtol=1e-5)


def test_no_prioritized_samples_uniformly_with_unit_weights():
    _, state, (after, _, _) = one_gradient_step(noisy=False)
    _, uniform_state, (uniform_after, _, _) = one_gradient_step(noisy=False, prioritized=False)
    leaves = lambda s: np.asarray(s.buffer.tree.nodes[256 : 256 + int(s.buffer.size)])
    assert np.unique(leaves(after)).size > 1  # the sampled rows took their own priorities
    assert np.unique(leaves(uniform_after)).size == 1  # untouched: every row at the first priority
    _, probability = rainbow.buffer_sample(uniform_state.buffer, jax.random.PRNGKey(0), 16, False)
    np.testing.assert_allclose(probability, 1 / int(uniform_state.buffer.size))


def test_no_dueling_drops_the_value_stream():
    dense_count = lambda flags: len(one_gradient_step(noisy=False, **flags)[1].params["params"])
    assert dense_count({}) == dense_count({"dueling": False}) + 1  # the value stream's layer


def test_no_noisy_draws_no_noise_and_explores_by_epsilon():
    setup, state, _ = one_gradient_step()
    obs = state.obs
    noisy = [rainbow.q_values(setup, state.params, obs, jax.random.PRNGKey(k)) for k in (0, 1)]
    assert not np.allclose(noisy[0], noisy[1])  # two draws of the noise, two Q-values
    assert "w_sigma" in str(jax.tree_util.tree_structure(state.params))
    plain_setup, plain_state, _ = one_gradient_step(noisy=False)
    plain = [rainbow.q_values(plain_setup, plain_state.params, obs, jax.random.PRNGKey(k)) for k in (0, 1)]
    np.testing.assert_array_equal(plain[0], plain[1])
    assert "w_sigma" not in str(jax.tree_util.tree_structure(plain_state.params))
    _, info = jax.lax.scan(functools.partial(rainbow.step, plain_setup), plain_state, jnp.arange(1))
    assert float(info.epsilon[0]) > 0.5  # epsilon-greedy, early in its schedule


def test_a_noisy_layer_draws_factorised_noise_of_independent_normals():
    """[RB-6] With mu 0 and sigma 1, a noisy layer of p = 2 inputs and 3 outputs maps 0 to its bias noise
    f(eps_out) [3] and the unit vector e_i to f(eps_in_i) f(eps_out) + f(eps_out). Over 4,000 draws,
    f(eps) = sgn(eps) sqrt|eps| of a standard normal has E f^2 = E|eps| = sqrt(2 / pi), and no factor
    correlates with another (one shared draw cut into overlapping eps_in and eps_out would)."""
    layer = rainbow.NoisyDense(3, std_init=0.5)
    params = layer.init({"params": jax.random.PRNGKey(0), "noise": jax.random.PRNGKey(1)}, jnp.zeros(2), True)
    ones = {
        name: jnp.ones_like(v) if "sigma" in name else jnp.zeros_like(v)
        for name, v in params["params"].items()
    }
    inputs = jnp.concatenate([jnp.zeros((1, 2)), jnp.eye(2)])  # [3, p]: 0, e_1, e_2
    draw = lambda key: layer.apply({"params": ones}, inputs, True, rngs={"noise": key})  # [3, 3]
    outputs = np.asarray(
        jax.vmap(draw)(jax.random.split(jax.random.PRNGKey(2), 4000)), np.float64
    )  # [K, 3, 3]
    f_out = outputs[:, 0]  # [K, 3]
    f_in = (outputs[:, 1:, 0] - f_out[:, None, 0]) / f_out[:, None, 0]  # [K, 2] from the first output
    factors = np.concatenate([f_in, f_out], axis=1)  # [K, 5]
    np.testing.assert_allclose((factors**2).mean(axis=0), np.sqrt(2 / np.pi), atol=0.05)
    correlation = np.corrcoef(factors, rowvar=False)  # [5, 5]
    assert np.abs(correlation - np.eye(5)).max() < 0.08, correlation.round(2)


def test_n_step_1_stores_the_one_step_target():
    for n, discount in ((3, 0.99**3), (1, 0.99)):
        _, state, _ = one_gradient_step(n_step=n, noisy=False)
        stored = np.asarray(state.buffer.data.discount[: int(state.buffer.size)])
        assert np.isclose(stored.max(), discount, rtol=1e-6), (n, stored.max())


# --- the whole run --------------------------------------------------------------------------


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    assert_chunks_equal_one_program(rainbow, tiny_args(total_timesteps=500, num_chunks=3))  # the sum tree too


TINY_RUN = [
    "--num-envs",
    "4",
    "--buffer-size",
    "200",
    "--batch-size",
    "16",
    "--learning-starts",
    "100",
    "--train-frequency",
    "4",
    "--target-network-frequency",
    "40",
    "--log-frequency",
    "100",
    "--total-timesteps",
    "2000",
    "--num-chunks",
    "20",
    "--n-atoms",
    "11",
    "--eval-episodes",
    "2",
]


@pytest.mark.slow  # 40 s: three processes; the default run resumes a checkpoint bitwise (test_contract.py)
def test_sigterm_then_resume_is_bitwise_with_non_uniform_priorities(tmp_path):
    """From the command line: SIGTERM after the first chunks, --resume, and the state (buffer, sum tree,
    window, networks) ends as the uninterrupted run's; the priorities it carries are not all alike."""
    straight = run_script("rainbow_jax", *TINY_RUN, "--output-dir", str(tmp_path / "a"))
    assert straight.returncode == 0, straight.stderr
    process = start_script("rainbow_jax", *TINY_RUN, "--output-dir", str(tmp_path / "b"))
    out = interrupt_after_compiling(process, 15)  # SIGTERM
    assert "--resume" in out
    (run_b,) = (tmp_path / "b").iterdir()
    resumed = run_script("rainbow_jax", "--resume", str(run_b))
    assert resumed.returncode == 0, resumed.stderr
    (run_a,) = (tmp_path / "a").iterdir()
    (_, state_a), (_, state_b) = read_state(rainbow, run_a), read_state(rainbow, run_b)
    assert tree_equal(state_a, state_b)
    leaves = np.asarray(state_a.buffer.tree.nodes[256:456])  # P = 256 for R = 200
    assert np.unique(leaves).size > 10  # non-uniform priorities, resumed bit for bit


# --- learning (minutes each: -m slow) --------------------------------------------------------


def evaluation(args) -> float:
    algo = rainbow.make_algorithm(args)
    key = jax.random.PRNGKey(1)
    state, _ = jax.jit(rainbow.make_train(args))(key)
    result = jax.jit(functools.partial(rainbow.evaluate_episodes, algo, 32))(
        algo.model(state), jax.random.fold_in(key, 1)
    )
    return float(result.returns.mean())


@pytest.mark.slow
@pytest.mark.parametrize(
    "off",
    [
        {},
        {"double_dqn": False},
        {"prioritized": False},
        {"dueling": False},
        {"n_step": 1},
        {"distributional": False},
        {"noisy": False},
    ],  # fmt: skip
)
def test_cartpole_learns_with_every_component_and_with_each_one_off(off):
    """The defaults (500k steps, seed 1) evaluate at least 475; each component switched off alone still
    trains CartPole (at least 300: an ablation may learn less well, it must still learn)."""
    assert evaluation(rainbow.Flags(**off)) >= (475 if not off else 300), off
