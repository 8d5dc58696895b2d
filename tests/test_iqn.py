"""Tests of vibe_rl/iqn_jax.py: the quantile Huber loss against a direct evaluation over the pairs, the
cosine embedding, QR-DQN's midpoints and head, an episode's end through `step` and `gradient_step`,
probes with a known return (a constant one through time limits; a coin flip's two quantiles), shapes
under jit and vmap, chunks, learning. The buffer, the schedule and the iteration plan are DQN's, tested
in test_dqn.py; the command-line contract (bad input, resume, run directory) is tested for every
script in test_contract.py."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    NO_LEARNING,
    ConstantRewardProbe,
    CountingProbe,
    ProbeParams,
    ProbeState,
    assert_chunks_equal_one_program,
    probe_spec,
    train_setup,
    tree_equal,
)
from gymnax.environments import environment, spaces

from vibe_rl import iqn_jax as iqn

# A tiny budget that still takes gradient steps: 400 env steps (4 iterations of 25 steps of 4 envs),
# learning from env step 100; few fractions, so the programs compile and run fast.
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
    num_tau_samples=8,
    num_tau_prime_samples=6,
    num_quantile_samples=4,
    quantile_embedding_dim=16,
)


def tiny_args(**overrides) -> iqn.Args:
    return iqn.Flags(**{**TINY, **overrides})


def reference_loss(quantiles, taus, targets, kappa):
    """The IQN paper's eq. (3), pair by pair: for each transition, sum over the online fractions i of
    the mean over the target fractions j of rho^kappa_tau_i(target_j - theta_i); then the batch's mean."""
    quantiles, taus, targets = (np.asarray(x, np.float64) for x in (quantiles, taus, targets))
    per_transition = []
    for theta, tau, target in zip(quantiles, taus, targets, strict=True):
        total = 0.0
        for theta_i, tau_i in zip(theta, tau, strict=True):
            pairs = []
            for target_j in target:
                u = target_j - theta_i
                huber = 0.5 * u**2 if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                pairs.append(abs(tau_i - (u < 0)) * huber / kappa)
            total += np.mean(pairs)
        per_transition.append(total)
    return np.mean(per_transition)


# --- the quantile Huber loss -----------------------------------------------------------------


def test_quantile_huber_loss_hand_computed():
    """One quantile theta = 0 at tau = 0.25, kappa 1: a target 3 above it (u = 3, the linear part) weighs
    tau: 0.25 * (3 - 0.5) = 0.625; a target 0.5 below it (the quadratic part) weighs 1 - tau:
    0.75 * 0.125 = 0.09375; the mean over the two targets is 0.359375."""
    loss = iqn.quantile_huber_loss(jnp.zeros((1, 1)), jnp.array([[0.25]]), jnp.array([[3.0, -0.5]]), 1.0)
    np.testing.assert_allclose(loss, (0.625 + 0.09375) / 2, rtol=1e-6)


@pytest.mark.parametrize("kappa", [1.0, 0.3, 2.5])
def test_quantile_huber_loss_is_eq_3_over_every_pair(kappa):
    """Random quantiles, fractions and targets, errors on both sides of kappa, Z = 4 online and Z' = 5
    target fractions: the loss is the pair-by-pair sum. The reference's planted bugs (a swapped tau,
    no 1/kappa, the sum and the mean exchanged) each give another number, so each would fail here."""
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    quantiles = 3.0 * jax.random.normal(keys[0], (6, 4))  # [B, Z]
    taus = jax.random.uniform(keys[1], (6, 4))  # [B, Z]
    targets = 3.0 * jax.random.normal(keys[2], (6, 5))  # [B, Z']
    loss = jax.jit(iqn.quantile_huber_loss)(quantiles, taus, targets, kappa)
    expected = reference_loss(quantiles, taus, targets, kappa)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    planted = {
        "a swapped tau": reference_loss(quantiles, 1.0 - taus, targets, kappa),
        "the sum and the mean exchanged": expected * 4 / 5,  # mean over i, sum over j: x Z' / Z
    }
    if kappa != 1.0:
        planted["no 1/kappa"] = expected * kappa
    for bug, value in planted.items():
        assert not np.isclose(float(loss), value, rtol=1e-3), bug


def test_quantile_huber_loss_gradient_pulls_each_quantile_to_its_fraction():
    """The gradient of one quantile against many targets is zero where a tau share of them lies below
    it: with kappa small (the quantile loss), theta's gradient is (1/Z') sum_j (1{u_j < 0} - tau)."""
    targets = jnp.arange(10.0)[None]  # [1, Z' = 10]: 0, 1, ..., 9
    gradient = jax.jit(jax.grad(iqn.quantile_huber_loss))
    tau = jnp.array([[0.3]])
    np.testing.assert_allclose(
        gradient(jnp.array([[2.5]]), tau, targets, 1e-3), [[0.0]], atol=1e-6
    )  # 3 below
    at_6_5 = (7 * 0.7 - 3 * 0.3) / 10  # 7 targets below it push it down, 3 above push it up
    np.testing.assert_allclose(gradient(jnp.array([[6.5]]), tau, targets, 1e-3), [[at_6_5]], atol=1e-6)


# --- the cosine embedding, the networks, QR-DQN's fractions -------------------------------------


def test_cosine_features_are_cos_pi_i_tau_from_i_0():
    taus = jnp.array([0.0, 0.5, 0.3])
    features = iqn.cosine_features(taus, 64)
    assert features.shape == (3, 64)
    np.testing.assert_allclose(features[:, 0], 1.0)  # i = 0: the constant feature
    np.testing.assert_allclose(features[0], 1.0)  # tau = 0
    np.testing.assert_allclose(features[1, :4], [1.0, 0.0, -1.0, 0.0], atol=1e-6)  # cos(pi i / 2)
    np.testing.assert_allclose(features[2], np.cos(np.pi * np.arange(64) * 0.3), atol=1e-5)


def test_the_implicit_quantile_network_is_the_head_of_psi_times_phi():
    """Z_tau(x, a) = head(psi(x) * ReLU(W cos(pi i tau) + b))_a, computed by hand from the parameters;
    obs [2, 3, 4] and taus [5] give [2, 3, 5, A]: every observation at every fraction."""
    network = iqn.ImplicitQuantileNetwork(num_actions=2, embedding_dim=64)
    obs = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 4))
    taus = jnp.array([0.05, 0.3, 0.5, 0.7, 0.95])
    params = network.init(jax.random.PRNGKey(1), obs, taus)
    out = network.apply(params, obs, taus)
    assert out.shape == (2, 3, 5, 2)
    p = params["params"]
    psi = iqn.Torso().apply({"params": p["Torso_0"]}, obs)  # [2, 3, 84]
    phi = jax.nn.relu(iqn.cosine_features(taus, 64) @ p["embedding"]["kernel"] + p["embedding"]["bias"])
    assert phi.shape == (5, 84) and p["embedding"]["kernel"].shape == (64, 84)
    by_hand = (psi[:, :, None, :] * phi) @ p["head"]["kernel"] + p["head"]["bias"]  # [2, 3, 5, 2]
    np.testing.assert_allclose(out, by_hand, rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[:, :, 0], out[:, :, -1])  # the fraction reaches the output
    # one row of fractions per observation ([IQN-9], the loss's): each row its own
    rows = jax.random.uniform(jax.random.PRNGKey(2), (2, 3, 5))  # [2, 3, Z]
    per_row = network.apply(params, obs, rows)  # [2, 3, 5, 2]
    np.testing.assert_allclose(
        per_row[1, 2], network.apply(params, obs[1, 2], rows[1, 2]), rtol=1e-5, atol=1e-6
    )


def test_qr_dqn_midpoints_and_fractions():
    np.testing.assert_allclose(iqn.quantile_midpoints(4), [1 / 8, 3 / 8, 5 / 8, 7 / 8])
    np.testing.assert_allclose(iqn.quantile_midpoints(1), [0.5])
    qr = iqn.build_setup(tiny_args(qr_dqn=True))
    assert (qr.args.num_tau_samples, qr.args.num_tau_prime_samples, qr.args.num_quantile_samples) == (8, 8, 8)
    key = jax.random.PRNGKey(0)
    np.testing.assert_allclose(iqn.draw_taus(qr, key, (8,)), iqn.quantile_midpoints(8))
    np.testing.assert_allclose(iqn.draw_taus(qr, key, (3, 8)), np.tile(iqn.quantile_midpoints(8), (3, 1)))
    setup = iqn.build_setup(tiny_args())
    drawn = iqn.draw_taus(setup, key, (1000,))  # IQN: U(0, 1), afresh with each key
    assert drawn.shape == (1000,) and float(drawn.min()) >= 0 and float(drawn.max()) < 1
    assert abs(float(drawn.mean()) - 0.5) < 0.05
    assert not np.allclose(drawn, iqn.draw_taus(setup, jax.random.PRNGKey(1), (1000,)))
    per_transition = iqn.draw_taus(setup, key, (2, 500))  # [B, Z]: every transition its own fractions
    assert not np.allclose(per_transition[0], per_transition[1])


def test_qr_dqn_changes_the_program():
    """--qr-dqn: no embedding parameters, a head of N x A outputs, its N quantiles at any observation;
    the iteration's program differs."""
    setup, qr = iqn.build_setup(tiny_args()), iqn.build_setup(tiny_args(qr_dqn=True))
    state, qr_state = (iqn.init_state(s, jax.random.PRNGKey(0)) for s in (setup, qr))
    assert set(state.params["params"]) == {"Torso_0", "embedding", "head"}
    assert set(qr_state.params["params"]) == {"Torso_0", "head"}  # no embedding
    assert state.params["params"]["head"]["kernel"].shape == (84, 2)  # one output per action, per fraction
    assert qr_state.params["params"]["head"]["kernel"].shape == (84, 8 * 2)  # N x A outputs
    quantiles = qr.network.apply(qr_state.params, state.obs, iqn.quantile_midpoints(8))
    assert quantiles.shape == (4, 8, 2)  # [N envs, N quantiles, A]
    program = lambda s, state: str(jax.make_jaxpr(functools.partial(iqn.iteration, s))(state, jnp.int32(0)))
    assert program(setup, state) != program(qr, qr_state)
    cosine = re.compile(
        r"f32\[\d+,16\] = cos "
    )  # the embedding's 16 features (CartPole's physics has cos too)
    assert cosine.search(program(setup, state)) and not cosine.search(program(qr, qr_state))
    assert iqn.make_algorithm(tiny_args(qr_dqn=True)).name == "QR-DQN"


def test_greedy_action_is_the_argmax_of_the_mean_quantile():
    """Action 0 has the highest top quantile, action 1 the higher mean: greedy picks 1. The evaluation
    reads the K midpoints, so it is deterministic."""
    quantiles = jnp.array([[[-9.0, 1.0], [-1.0, 1.0], [0.0, 1.0], [3.0, 1.0]]])  # [1, K = 4, A = 2]
    seen = []

    def apply(params, obs, taus):
        seen.append(taus)
        return quantiles

    network = type("Fixed", (), {"apply": staticmethod(apply)})
    setup = iqn.build_setup(tiny_args())._replace(network=network)
    assert int(iqn.greedy_action(setup, None, jnp.zeros((1, 4)))[0]) == 1
    np.testing.assert_allclose(seen[0], iqn.quantile_midpoints(4))
    np.testing.assert_allclose(iqn.q_values(setup, None, jnp.zeros((1, 4)), seen[0]), [[-1.75, 1.0]])


# --- an episode's end through step and gradient_step -------------------------------------------------


class TableNetwork:
    """A fixed 'network' for CountingProbe (obs [t]): both actions' two quantiles are row t of QUANTILES,
    at QR-DQN's fractions 1/4 and 3/4; its parameters are a placeholder."""

    QUANTILES = jnp.array([[-3.0, -1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.5, 1.5], [2.0, 4.0]])

    def init(self, key, obs, taus):
        return {"unused": jnp.zeros(1)}

    def apply(self, params, obs, taus):  # obs [X, 1], taus [2] -> [X, Z = 2, A = 2]
        rows = self.QUANTILES[obs[:, 0].astype(jnp.int32)] + 0.0 * params["unused"]
        return jnp.broadcast_to(rows[:, :, None], (obs.shape[0], 2, 2))


@pytest.mark.parametrize(
    ("terminate_at", "targets"),
    [
        (
            None,
            [1.0 + 0.5 * 2.0, 1.0 + 0.5 * 4.0],
        ),  # truncated at 5: r + gamma Z(obs [5]), not of the reset obs
        (5, [1.0, 1.0]),  # terminated at step 5: the reward alone
    ],
)
def test_the_target_of_an_episode_end_through_step_and_gradient_step(terminate_at, targets):
    """CountingProbe's 5th step ends the episode; a buffer of one slot then holds only that transition
    (s = [4], r = 1, s' = the real final obs [5], not the reset [0]). QR-DQN with N = 2 (fractions 1/4,
    3/4), gamma 0.5: the gradient step's loss is eq. (3) for the online quantiles Z(s = [4]) = (0.5, 1.5)
    and the targets r + gamma Z(s' = [5]) = 1 + 0.5 (2, 4), or r alone after a termination."""
    one_slot = dict(
        num_envs=1, buffer_size=1, batch_size=1, qr_dqn=True, num_tau_samples=2, gamma=0.5, kappa=1.0
    )
    setup = iqn.build_setup(tiny_args(**one_slot, **NO_LEARNING))
    setup = setup._replace(spec=probe_spec(iqn, CountingProbe(terminate_at)), obs_dtype=jnp.float32)
    setup = setup._replace(network=TableNetwork())
    state = iqn.init_state(setup, jax.random.PRNGKey(0))
    state, _ = jax.lax.scan(functools.partial(iqn.step, setup), state, jnp.arange(5))
    stored = state.buffer.data
    assert (stored.obs[0, 0], stored.reward[0], stored.next_obs[0, 0]) == (4.0, 1.0, 5.0)
    assert bool(stored.terminated[0]) == (terminate_at is not None)
    assert float(state.obs[0, 0]) == 0.0  # the env itself was reset
    _, loss, q_mean = jax.jit(functools.partial(iqn.gradient_step, setup))(state, jax.random.PRNGKey(1))
    expected = reference_loss([[0.5, 1.5]], [[0.25, 0.75]], [targets], 1.0)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(q_mean, 1.0)  # the mean of the online quantiles (0.5, 1.5)


# --- probes: a constant return through time limits; a coin flip's quantiles ---------------------------


PROBE = dict(
    total_timesteps=4000,
    learning_rate=3e-3,
    buffer_size=1000,
    batch_size=64,
    learning_starts=200,
    target_network_frequency=100,
    log_frequency=1000,
    num_tau_samples=16,
    num_tau_prime_samples=16,
    num_quantile_samples=8,
    kappa=1.0,  # the papers': the loss's minimiser is then the quantile (a large kappa learns expectiles)
)


@pytest.mark.parametrize("qr_dqn", [False, True])
def test_the_mean_quantile_bootstraps_through_time_limits(qr_dqn):
    """Constant reward 1, only time-limit ends, gamma 0.5: the return is 1 / (1 - gamma) = 2 at every
    fraction, so Q is 2 (treating truncation as termination: about 1.6)."""
    setup = iqn.build_setup(tiny_args(**PROBE, gamma=0.5, qr_dqn=qr_dqn))
    env = ConstantRewardProbe()
    setup = setup._replace(spec=iqn.env_spec(env, env.default_params), obs_dtype=jnp.float32)
    network = iqn.QuantileRegressionNetwork(2, 16) if qr_dqn else iqn.ImplicitQuantileNetwork(2, 16)
    setup = setup._replace(network=network)
    state, _ = jax.jit(lambda key: train_setup(iqn, setup, key))(jax.random.PRNGKey(0))
    taus = iqn.quantile_midpoints(16)
    np.testing.assert_allclose(
        iqn.q_values(setup, state.params, jnp.ones((1, 1)), taus), [[2.0, 2.0]], atol=0.05
    )


class CoinFlipProbe(environment.Environment):
    """One step, then the episode terminates: the reward is 0 or 2 with probability 1/2 each, whatever
    the action. The return's quantile function is 0 below tau = 1/2 and 2 above it."""

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def step_env(self, key, state, action, params):
        reward = 2.0 * jax.random.bernoulli(key).astype(jnp.float32)
        return jnp.ones(1), ProbeState(time=state.time + 1), reward, jnp.asarray(True), {}

    def reset_env(self, key, params):
        return jnp.ones(1), ProbeState(time=0)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)


@pytest.mark.parametrize("qr_dqn", [False, True])
def test_the_quantiles_of_a_coin_flip(qr_dqn):
    """A return of 0 or 2, each with probability 1/2, at kappa 1: the minimiser of the quantile Huber loss
    at tau is kappa tau / (1 - tau) below tau = 1/2 and 2 - kappa (1 - tau) / tau above it (the Huber
    part smooths the quantile's jump from 0 to 2). The learned quantiles at the 10 midpoints reach them,
    within 0.15 root mean square (a swapped tau learns them upside down, at about 1; a loss without the
    Huber part learns 0 and 2, at 0.46), and their mean is 1. The buffer keeps all 12k flips (a buffer
    of 1k holds a sample whose share of 2s moves the quantiles near tau = 1/2 by 0.1)."""
    probe = {
        **PROBE,
        "num_tau_samples": 10,
        "total_timesteps": 12000,
        "learning_rate": 1e-3,
        "buffer_size": 12000,
    }
    setup = iqn.build_setup(tiny_args(**probe, qr_dqn=qr_dqn))
    env = CoinFlipProbe()
    setup = setup._replace(spec=iqn.env_spec(env, env.default_params), obs_dtype=jnp.float32)
    network = iqn.QuantileRegressionNetwork(2, 10) if qr_dqn else iqn.ImplicitQuantileNetwork(2, 16)
    setup = setup._replace(network=network)
    state, _ = jax.jit(lambda key: train_setup(iqn, setup, key))(jax.random.PRNGKey(0))
    taus = iqn.quantile_midpoints(10)  # 0.05, 0.15, ..., 0.95
    quantiles = np.asarray(setup.network.apply(state.params, jnp.ones((1, 1)), taus)[0])  # [Z, A]
    tau = np.asarray(taus)[:, None]  # [Z, 1]
    minimiser = np.where(tau < 0.5, tau / (1 - tau), 2 - (1 - tau) / tau)  # [Z, 1], kappa = 1
    rms = np.sqrt(((quantiles - minimiser) ** 2).mean(axis=0))  # [A]
    assert (rms < 0.15).all(), (rms, quantiles.T.round(2))
    np.testing.assert_allclose(quantiles.mean(axis=0), [1.0, 1.0], atol=0.1)


# --- shapes under jit and vmap; gradient steps; chunks equal the single program ----------------


@pytest.mark.parametrize(
    ("env_id", "cnn", "qr_dqn"), [("CartPole-v1", False, False), ("Breakout-MinAtar", True, True)]
)
def test_train_shapes_under_jit_and_vmap(env_id, cnn, qr_dqn):
    args = tiny_args(env_id=env_id, double_dqn=cnn, qr_dqn=qr_dqn)
    setup = iqn.build_setup(args)
    spec, sizes = setup.spec, setup.sizes
    assert setup.network.cnn == cnn  # --network auto picks by the observation's shape
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(iqn.make_train(args)))(keys)
    assert state.obs.shape == (3, args.num_envs, *spec.obs_shape)
    assert state.buffer.data.obs.shape == (3, args.buffer_size, *spec.obs_shape)
    assert state.buffer.data.obs.dtype == setup.obs_dtype
    assert metrics.loss.shape == (3, sizes.num_iterations) == (3, 4)
    quantiles = jax.vmap(setup.network.apply, in_axes=(0, 0, None))(
        state.params, state.obs, iqn.quantile_midpoints(8)
    )
    assert quantiles.shape == (3, args.num_envs, 8, spec.action_dim)  # [S, N, Z, A]
    # gradient steps at global steps 104, 108, ..., 400: 75 of them, none in the first iteration
    np.testing.assert_array_equal(metrics.gradient_steps, [[0, 25, 25, 25]] * 3)
    assert bool(jnp.all(jnp.isnan(metrics.loss[:, 0]))) and bool(jnp.all(jnp.isfinite(metrics.loss[:, 1:])))
    assert bool(jnp.all(metrics.loss[:, 1:] > 0))
    init = jax.jit(jax.vmap(functools.partial(iqn.init_state, setup)))(keys)
    assert not tree_equal(init.params, state.params)  # it took gradient steps
    assert not tree_equal(init.target_params, state.target_params)  # copied at 120, 160, ...
    assert not np.allclose(metrics.loss[0, 1:], metrics.loss[1, 1:])  # independent seeds
    if cnn:  # 3 seeds x the 3x3 conv on C = 4 channels as a [9C, 16] kernel
        assert state.params["params"]["Torso_0"]["Conv3x3_0"]["Dense_0"]["kernel"].shape == (3, 36, 16)


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    assert_chunks_equal_one_program(iqn, tiny_args(total_timesteps=500, num_chunks=3))


# --- flags ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(env_id="Pendulum-v1"),
            "--env-id Pendulum-v1: IQN needs discrete actions, not Box; "
            "use vibe_rl/sac_jax.py or vibe_rl/td3_jax.py",
        ),
        (dict(kappa=0.0), "--kappa must be positive, got 0.0"),
        (dict(num_tau_samples=0), "--num-tau-samples must be a positive integer, got 0"),
        (
            dict(num_tau_samples=2**16, num_tau_prime_samples=2**16),
            "--batch-size 16 x --num-tau-samples 65536 x --num-tau-prime-samples 65536 = 68,719,476,736",
        ),
        (dict(target_update_rate=1.5), "--target-update-rate must lie in (0, 1], got 1.5"),
    ],
)
def test_bad_flags_are_refused_in_one_line(overrides, message):
    with pytest.raises(iqn.ArgsError) as error:
        iqn.build_setup(tiny_args(**overrides))
    assert str(error.value).startswith(message)


def test_metric_tags_are_cleanrl_c51s():
    assert set(iqn.make_algorithm(iqn.Flags()).metric_tags.values()) >= {
        "losses/loss",
        "losses/q_values",
        "charts/epsilon",
        "charts/episodic_return",
        "charts/episodic_length",
    }


# --- learning ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("qr_dqn", [False, True])
def test_cartpole_learns_with_the_defaults(qr_dqn):
    """The defaults (500k steps), seed 1, IQN and QR-DQN: the greedy evaluation reaches 475."""
    args = iqn.Flags(qr_dqn=qr_dqn)
    algo = iqn.make_algorithm(args)
    key = jax.random.PRNGKey(1)
    state, _ = jax.jit(iqn.make_train(args))(key)
    result = jax.jit(functools.partial(iqn.evaluate_episodes, algo, 32))(
        algo.model(state), jax.random.fold_in(key, 1)
    )
    assert float(result.returns.mean()) >= 475, result.returns
