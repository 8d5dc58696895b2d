"""Tests of vibe_rl/c51_jax.py: the categorical projection and the loss on hand-computed examples (a
truncation and a termination also through `step` and `gradient_step`), time limits on a probe env,
shapes under jit and vmap, chunks, learning. The buffer, the schedule
and the iteration plan are DQN's, tested in test_dqn.py; the command-line contract (bad input,
resume, run directory) is tested for every script in test_contract.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    NO_LEARNING,
    ConstantRewardProbe,
    CountingProbe,
    assert_chunks_equal_one_program,
    probe_spec,
    tree_equal,
)

from vibe_rl import c51_jax as c51, rainbow_jax as rainbow

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
    n_atoms=11,
    v_min=-10.0,
    v_max=10.0,
)
ATOMS = jnp.array([-2.0, -1.0, 0.0, 1.0, 2.0])  # v_min -2, v_max 2, dz 1
# The categorical projection of C51, and Rainbow's, which takes each transition's discount (gamma^n, or 0
# after a termination) in place of gamma and the termination: both held to the same hand-computed cases
PROJECTIONS = {
    "c51": c51.categorical_projection,
    "rainbow": lambda probs, rewards, terminated, gamma, atoms: rainbow.categorical_projection(
        probs, rewards, gamma * (1.0 - jnp.asarray(terminated, jnp.float32)), atoms
    ),
}


def tiny_args(**overrides) -> c51.Args:
    return c51.Flags(**{**TINY, **overrides})


def reference_projection(next_probs, rewards, terminated, gamma, atoms):
    """The paper's Algorithm 1 as loops: b = (Tz - v_min) / dz, mass to floor(b) and ceil(b)."""
    next_probs, atoms = np.asarray(next_probs, np.float64), np.asarray(atoms, np.float64)
    delta, out = (atoms[-1] - atoms[0]) / (len(atoms) - 1), np.zeros_like(next_probs)
    for row, (p, r, done) in enumerate(zip(next_probs, rewards, terminated, strict=True)):
        for j, z in enumerate(atoms):
            b = np.clip((r + gamma * (1 - done) * z - atoms[0]) / delta, 0, len(atoms) - 1)
            low, up = int(np.floor(b)), int(np.ceil(b))
            if low == up:
                out[row, low] += p[j]
            else:
                out[row, low] += p[j] * (up - b)
                out[row, up] += p[j] * (b - low)
    return out


# --- the categorical projection --------------------------------------------------------


@pytest.mark.parametrize("projection", PROJECTIONS)
def test_categorical_projection_hand_computed(projection):
    next_probs = jnp.array(
        [
            [0.2, 0.0, 0.3, 0.0, 0.5],  # not terminated (a truncation too): bootstraps from Z(s')
            [0.4, 0.0, 0.0, 0.0, 0.6],  # atoms fall below v_min and onto v_max
            [0.4, 0.0, 0.0, 0.0, 0.6],  # atoms fall above v_max
            [0.2, 0.2, 0.2, 0.2, 0.2],  # termination: the reward alone
            [0.2, 0.2, 0.2, 0.2, 0.2],  # termination with a reward beyond v_max
        ]
    )
    rewards = jnp.array([0.5, -1.8, 1.5, 0.3, 5.0])
    terminated = jnp.array([False, False, False, True, True])
    projected = PROJECTIONS[projection](next_probs, rewards, terminated, 0.5, ATOMS)
    expected = [
        # Tz = 0.5 + 0.5 z: -2 -> -0.5 (0.1 to -1, 0), 0 -> 0.5 (0.15 to 0, 1), 2 -> 1.5 (0.25 to 1, 2)
        [0.0, 0.1, 0.25, 0.4, 0.25],
        # Tz = -1.8 + 0.5 z: -2 -> -2.8, clipped onto -2 (all 0.4); 2 -> -0.8 (0.48 to -1, 0.12 to 0)
        [0.4, 0.48, 0.12, 0.0, 0.0],
        # Tz = 1.5 + 0.5 z: -2 -> 0.5 (0.2 to 0 and 1); 2 -> 2.5, clipped onto 2 (all 0.6)
        [0.0, 0.0, 0.2, 0.2, 0.6],
        # terminated: every atom goes to 0.3, split 0.7 / 0.3 between its neighbours 0 and 1
        [0.0, 0.0, 0.7, 0.3, 0.0],
        # terminated beyond v_max: everything on the edge atom
        [0.0, 0.0, 0.0, 0.0, 1.0],
    ]
    np.testing.assert_allclose(projected, expected, atol=1e-6)
    np.testing.assert_allclose(
        projected, reference_projection(next_probs, rewards, terminated, 0.5, ATOMS), atol=1e-6
    )
    # the same reward without the termination bootstraps: not the reward alone
    not_terminated = PROJECTIONS[projection](next_probs[3:4], rewards[3:4], jnp.array([False]), 0.5, ATOMS)
    assert not np.allclose(not_terminated, [expected[3]], atol=1e-3)


class TableNetwork:
    """A fixed 'network' for CountingProbe (obs [t]): both actions' distribution on ATOMS is row t of
    PROBS; its parameters are a placeholder the gradient step cannot change the output through."""

    PROBS = jnp.array(
        [
            [1.0, 0.0, 0.0, 0.0, 0.0],  # t = 0, the reset observation: all mass on -2
            *[[0.2, 0.2, 0.2, 0.2, 0.2]] * 3,  # t = 1, 2, 3
            [0.1, 0.1, 0.2, 0.3, 0.3],  # t = 4: the online distribution of the last transition's s
            [0.2, 0.0, 0.3, 0.0, 0.5],  # t = 5, the real final observation
        ]
    )

    def init(self, key, obs):
        return {"unused": jnp.zeros(1)}

    def apply(self, params, obs):  # obs [X, 1] -> logits [X, A = 2, K = 5]
        logits = jnp.log(self.PROBS[obs[:, 0].astype(jnp.int32)] + 1e-30) + 0.0 * params["unused"]
        return jnp.broadcast_to(logits[:, None, :], (obs.shape[0], 2, 5))


@pytest.mark.parametrize(
    ("terminate_at", "target"),
    [
        # truncated by the time limit 5: Tz = 1 + 0.5 z of Z(obs [5]) = [0.2, 0, 0.3, 0, 0.5] at z =
        # -2, 0, 2 lands on 0, 1, 2 exactly (from Z(reset obs [0]) it would be all on 0)
        (None, [0.0, 0.0, 0.2, 0.3, 0.5]),
        (5, [0.0, 0.0, 0.0, 1.0, 0.0]),  # terminated at step 5: the reward 1 alone
    ],
)
def test_the_target_of_an_episode_end_through_step_and_gradient_step(terminate_at, target):
    """CountingProbe's 5th step ends the episode; a buffer of one slot then holds only that
    transition (s = [4], r = 1, s' = the real final obs [5], not the reset [0]). The gradient step's
    cross-entropy is -sum_i m_i log p_i(s = [4]) for the hand-computed projected target m."""
    atoms = dict(n_atoms=5, v_min=-2.0, v_max=2.0)  # ATOMS
    one_slot = dict(num_envs=1, buffer_size=1, batch_size=1)  # a batch is at most the buffer
    setup = c51.build_setup(tiny_args(**one_slot, gamma=0.5, **atoms, **NO_LEARNING))
    spec = probe_spec(c51, CountingProbe(terminate_at))
    setup = setup._replace(spec=spec, obs_dtype=jnp.float32, network=TableNetwork())
    state = c51.init_state(setup, jax.random.PRNGKey(0))
    state, _ = jax.lax.scan(functools.partial(c51.step, setup), state, jnp.arange(5))
    stored = state.buffer.data
    assert (stored.obs[0, 0], stored.reward[0], stored.next_obs[0, 0]) == (4.0, 1.0, 5.0)
    assert bool(stored.terminated[0]) == (terminate_at is not None)
    assert float(state.obs[0, 0]) == 0.0  # the env itself was reset
    _, loss, _ = jax.jit(functools.partial(c51.gradient_step, setup))(state, jax.random.PRNGKey(1))
    expected = -(np.asarray(target) * np.log(TableNetwork.PROBS[4])).sum()
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


@pytest.mark.parametrize("projection", PROJECTIONS)
def test_categorical_projection_conserves_mass_and_matches_algorithm_1(projection):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    atoms = jnp.linspace(-10.0, 10.0, 51)
    next_probs = jax.nn.softmax(jax.random.normal(keys[0], (256, 51)) * 3, axis=-1)  # [B, K]
    rewards = jax.random.uniform(keys[1], (256,), minval=-15.0, maxval=15.0)  # some beyond the support
    terminated = jax.random.bernoulli(keys[2], 0.3, (256,))
    projected = jax.jit(PROJECTIONS[projection], static_argnums=3)(
        next_probs, rewards, terminated, 0.99, atoms
    )
    assert projected.shape == (256, 51) and bool((projected >= 0).all())
    np.testing.assert_allclose(projected.sum(axis=-1), 1.0, rtol=1e-5)
    reference = reference_projection(next_probs, np.asarray(rewards), np.asarray(terminated), 0.99, atoms)
    np.testing.assert_allclose(projected, reference, atol=1e-5)


# --- the loss and the expected Q -----------------------------------------------------------


def test_cross_entropy_loss_hand_computed():
    logits = jnp.log(jnp.array([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]))  # [B, K]
    target = jnp.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    np.testing.assert_allclose(c51.c51_loss(logits, target), (np.log(4) + np.log(3)) / 2, rtol=1e-6)
    np.testing.assert_allclose(c51.c51_loss(logits + 7.0, target), (np.log(4) + np.log(3)) / 2, rtol=1e-6)


def test_expected_q_and_greedy_action_use_the_mean_of_the_distribution():
    probs = jnp.array([[[0.5, 0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0, 0.0]]])  # [1, A=2, K]
    np.testing.assert_allclose(c51.expected_q(probs, ATOMS), [[0.0, 1.0]])
    # action 0 has the highest atom's mass, action 1 the higher mean: greedy picks 1
    setup = c51.build_setup(tiny_args(n_atoms=5, v_min=-2.0, v_max=2.0))
    np.testing.assert_allclose(setup.atoms, ATOMS)
    logits = jnp.log(probs + 1e-12)
    network = type("Fixed", (), {"apply": staticmethod(lambda params, obs: logits)})
    assert int(c51.greedy_action(setup._replace(network=network), None, jnp.zeros((1, 4)))[0]) == 1


# --- time limits: truncation bootstraps through the projection -------------------------------


def test_expected_q_bootstraps_through_time_limit():
    """Constant reward 1, only time-limit ends, gamma 0.5: the return distribution is a point mass
    at 1 / (1 - gamma) = 2, so the expected Q is 2 (treating truncation as termination: about 1.6)."""
    setup = c51.build_setup(
        tiny_args(
            total_timesteps=6000,
            gamma=0.5,
            learning_rate=3e-3,
            buffer_size=1000,
            batch_size=64,
            learning_starts=200,
            target_network_frequency=100,
            log_frequency=1000,
            n_atoms=21,
            v_min=0.0,
            v_max=4.0,
        )
    )
    env = ConstantRewardProbe()
    setup = setup._replace(spec=c51.env_spec(env, env.default_params), obs_dtype=jnp.float32)
    setup = setup._replace(network=c51.QNetwork(2, 21))
    iterations = jnp.arange(setup.sizes.num_iterations)
    train = lambda key: jax.lax.scan(
        functools.partial(c51.iteration, setup), c51.init_state(setup, key), iterations
    )
    state, _ = jax.jit(train)(jax.random.PRNGKey(0))
    np.testing.assert_allclose(c51.q_values(setup, state.params, jnp.ones((1, 1))), [[2.0, 2.0]], atol=0.05)


# --- shapes under jit and vmap; gradient steps; chunks equal the single program ----------------


@pytest.mark.parametrize(("env_id", "cnn"), [("CartPole-v1", False), ("Breakout-MinAtar", True)])
def test_train_shapes_under_jit_and_vmap(env_id, cnn):
    args = tiny_args(env_id=env_id, double_dqn=cnn)
    setup = c51.build_setup(args)
    spec, sizes = setup.spec, setup.sizes
    assert setup.network.cnn == cnn  # --network auto picks by the observation's shape
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(c51.make_train(args)))(keys)
    assert state.obs.shape == (3, args.num_envs, *spec.obs_shape)
    assert state.buffer.data.obs.shape == (3, args.buffer_size, *spec.obs_shape)
    assert state.buffer.data.obs.dtype == setup.obs_dtype
    assert metrics.loss.shape == (3, sizes.num_iterations) == (3, 4)
    logits = jax.vmap(setup.network.apply)(state.params, state.obs)
    assert logits.shape == (3, args.num_envs, spec.action_dim, args.n_atoms)  # [S, N, A, K]
    # gradient steps at global steps 104, 108, ..., 400: 75 of them, none in the first iteration
    np.testing.assert_array_equal(metrics.gradient_steps, [[0, 25, 25, 25]] * 3)
    assert bool(jnp.all(jnp.isnan(metrics.loss[:, 0]))) and bool(jnp.all(jnp.isfinite(metrics.loss[:, 1:])))
    assert bool(jnp.all(metrics.loss[:, 1:] > 0))  # a cross-entropy
    init = jax.jit(jax.vmap(functools.partial(c51.init_state, setup)))(keys)
    assert not tree_equal(init.params, state.params)  # it took gradient steps
    assert not tree_equal(init.target_params, state.target_params)  # copied at 120, 160, ...
    assert not np.allclose(metrics.loss[0, 1:], metrics.loss[1, 1:])  # independent seeds
    if cnn:  # 3 seeds x the 3x3 conv on C = 4 channels as a [9C, 16] kernel
        assert state.params["params"]["Conv3x3_0"]["Dense_0"]["kernel"].shape == (3, 36, 16)


def test_smoke_run_takes_gradient_steps_that_lower_the_loss_of_a_batch():
    args = tiny_args()
    setup = c51.build_setup(args)
    state = c51.init_state(setup, jax.random.PRNGKey(3))
    state, _ = jax.lax.scan(functools.partial(c51.step, setup), state, jnp.arange(25))  # fill the buffer
    before = state.params
    gradient_step, losses = jax.jit(functools.partial(c51.gradient_step, setup)), []
    for _ in range(20):  # the same batch (same key) each time: its loss must go down
        state, loss, _q = gradient_step(state, jax.random.PRNGKey(0))
        losses.append(float(loss))
    assert not tree_equal(before, state.params) and losses[-1] < losses[0], losses


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    assert_chunks_equal_one_program(c51, tiny_args(total_timesteps=500, num_chunks=3))


# --- flags ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(env_id="Pendulum-v1"),
            "--env-id Pendulum-v1: C51 needs discrete actions, not Box; "
            "use vibe_rl/sac_jax.py or vibe_rl/td3_jax.py",
        ),
        (dict(v_min=5.0, v_max=5.0), "--v-min 5.0 must be below --v-max 5.0"),
        (dict(n_atoms=1), "--n-atoms must be at least 2, got 1"),
    ],
)
def test_bad_flags_are_refused_in_one_line(overrides, message):
    with pytest.raises(c51.ArgsError) as error:
        c51.build_setup(tiny_args(**overrides))
    assert str(error.value) == message


def test_metric_tags_are_cleanrl_c51s():
    assert set(c51.make_algorithm(c51.Flags()).metric_tags.values()) >= {
        "losses/loss",
        "losses/q_values",
        "charts/epsilon",
        "charts/episodic_return",
        "charts/episodic_length",
    }


# --- learning ------------------------------------------------------------------------------


@pytest.mark.slow
def test_cartpole_learns_with_the_defaults():
    """CleanRL's c51_jax.py defaults (500k steps), seed 1: the greedy evaluation reaches 475."""
    args = c51.Flags()
    algo = c51.make_algorithm(args)
    key = jax.random.PRNGKey(1)
    state, _ = jax.jit(c51.make_train(args))(key)
    result = jax.jit(functools.partial(c51.evaluate_episodes, algo, 32))(
        algo.model(state), jax.random.fold_in(key, 1)
    )
    assert float(result.returns.mean()) >= 475, result.returns
