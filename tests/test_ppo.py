"""Tests of vibe_rl/ppo_jax_scan.py: the math, shapes under jit and vmap, chunking, a probe
environment, the --target-kl early stop, and learning. What every script guarantees on the
command line (bad input, resume, run directory, ...) is in test_contract.py."""

from __future__ import annotations

import dataclasses
import math

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import ConstantRewardProbe, check_vmapped_init, load_script, run_in_chunks, tree_equal

from vibe_rl import ppo_jax_scan as ppo

TINY = dict(num_envs=2, num_steps=8, total_timesteps=80, num_minibatches=2, update_epochs=2)


def tiny(**overrides) -> ppo.Setup:
    return ppo.build_setup(ppo.Flags(**{**TINY, **overrides}))


# --- math against hand-computed values -------------------------------------------------


@pytest.mark.parametrize("script", ["ppo_jax_scan", "ppo_multigpu", "ppo_rnn_jax"])  # each has its own copy
def test_gae_hand_computed_with_termination_and_truncation(script):
    # gamma 0.9, lambda 0.8. Env 0: step 1 terminates, step 2 is truncated (bootstrap from
    # V(final_obs) = 10). Env 1: same, but step 1 is terminated AND truncated:
    # termination wins, so its final value 8 must be ignored.
    rewards = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    values = jnp.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5], [2.0, 2.0]])
    terminated = jnp.array([[0, 0], [1, 1], [0, 0], [0, 0]], bool)
    truncated = jnp.array([[0, 0], [0, 1], [1, 1], [0, 0]], bool)
    final_values = jnp.array([[7.0, 7.0], [8.0, 8.0], [10.0, 10.0], [9.0, 9.0]])
    last_value = jnp.array([3.0, 3.0])
    advantages, returns = load_script(script).compute_gae(
        rewards, values, terminated, truncated, final_values, last_value, 0.9, 0.8
    )
    # t=3: 4 + 0.9*3 - 2 = 4.7 (bootstraps from last_value)
    # t=2: 3 + 0.9*10 - 1.5 = 10.5 (truncated: V(final_obs)); the recursion stops
    # t=1: 2 + 0 - 1 = 1 (terminated: no bootstrap)
    # t=0: delta 1 + 0.9*1.0 - 0.5 = 1.4; A = 1.4 + 0.9*0.8*1 = 2.12
    expected = np.array([2.12, 1.0, 10.5, 4.7])
    np.testing.assert_allclose(advantages, np.stack([expected, expected], 1), rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], expected + values[:, 0], rtol=1e-6)


def test_gae_without_episode_ends_is_discounted_td_sum():
    rewards = jnp.ones((3, 1))
    values = jnp.zeros((3, 1))
    no = jnp.zeros((3, 1), bool)
    advantages, _ = ppo.compute_gae(rewards, values, no, no, values, jnp.zeros(1), 0.5, 1.0)
    np.testing.assert_allclose(advantages[:, 0], [1.75, 1.5, 1.0])  # lambda=1: MC returns


def test_policy_loss_hand_computed():
    new_log_prob = jnp.array([0.0, math.log(1.5)])
    old_log_prob = jnp.zeros(2)
    advantages = jnp.array([1.0, -1.0])
    loss, old_kl, kl, clipfrac = ppo.policy_loss_fn(new_log_prob, old_log_prob, advantages, 0.2, False)
    # ratios 1 and 1.5: max(-1*1, -1*1) = -1 and max(1.5, 1.2) = 1.5 -> mean 0.25
    np.testing.assert_allclose(loss, 0.25, rtol=1e-6)
    np.testing.assert_allclose(old_kl, -math.log(1.5) / 2, rtol=1e-6)
    np.testing.assert_allclose(kl, (0.5 - math.log(1.5)) / 2, rtol=1e-6)
    np.testing.assert_allclose(clipfrac, 0.5)


def test_policy_loss_normalises_advantages():
    advantages = jnp.array([1.0, 3.0])  # normalised to [-1, 1]
    loss, *_ = ppo.policy_loss_fn(jnp.zeros(2), jnp.zeros(2), advantages, 0.2, True)
    np.testing.assert_allclose(loss, 0.0, atol=1e-6)


def test_value_loss_clipped_and_unclipped():
    new, old, target = jnp.array([1.0, 3.0]), jnp.zeros(2), jnp.array([2.0, 2.0])
    # clipped predictions 0.2, 0.2 -> squared errors 3.24 beat 1.0 -> 0.5 * 3.24
    np.testing.assert_allclose(ppo.value_loss_fn(new, old, target, 0.2, True), 1.62, rtol=1e-6)
    np.testing.assert_allclose(ppo.value_loss_fn(new, old, target, 0.2, False), 0.5, rtol=1e-6)


def test_policies_against_closed_forms():
    """The policies, the distrax distributions the Actor builds, against closed forms; and the
    samples rollout_step draws from them (Gumbel-max; mean + std * noise)."""
    logits = np.array([[1.0, 2.0, 0.5]], np.float32)
    p = np.exp(logits[0]) / np.exp(logits[0]).sum()
    categorical = distrax.Categorical(logits=logits)
    np.testing.assert_allclose(categorical.log_prob(jnp.array([1])), np.log(p[1])[None], rtol=1e-6)
    np.testing.assert_allclose(categorical.entropy(), [-(p * np.log(p)).sum()], rtol=1e-6)
    every_action = categorical.log_prob(jnp.arange(3)[:, None])  # [3, 1]: each action's log pi
    np.testing.assert_allclose(every_action[:, 0], np.log(p), rtol=1e-6)
    assert int(categorical.mode()[0]) == 1
    draws = jnp.argmax(categorical.logits + jax.random.gumbel(jax.random.PRNGKey(0), (20000, 3)), axis=-1)
    np.testing.assert_allclose(np.bincount(np.asarray(draws), minlength=3) / 20000, p, atol=0.01)

    mean, log_std = np.array([[0.5, -1.0]], np.float32), np.array([0.1, -0.3], np.float32)
    std = np.exp(log_std)
    gauss = distrax.MultivariateNormalDiag(mean, np.broadcast_to(std, mean.shape))
    density = np.exp(-0.5 * ((0 - mean[0]) / std) ** 2) / (std * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(gauss.log_prob(jnp.zeros((1, 2))), [np.log(density).sum()], rtol=1e-5)
    np.testing.assert_allclose(gauss.entropy(), [np.sum(0.5 * np.log(2 * np.pi * np.e * std**2))], rtol=1e-5)
    np.testing.assert_allclose(gauss.mode(), mean)
    draws = gauss.loc + gauss.scale_diag * jax.random.normal(jax.random.PRNGKey(1), (20000, 2))
    np.testing.assert_allclose(draws.mean(0), mean[0], atol=0.03)
    np.testing.assert_allclose(draws.std(0), std, rtol=0.03)


def test_actor_heads_discrete_and_continuous():
    """The actor gives a Categorical over K actions, or a Gaussian with a state-independent std
    (log-std initialised to 0) whose mode is the mean; the evaluation action is clipped."""
    for env_id, kind in (("CartPole-v1", "Categorical"), ("Pendulum-v1", "MultivariateNormalDiag")):
        agent = tiny(env_id=env_id)
        state = ppo.init_state(agent, jax.random.PRNGKey(0))
        obs = jnp.ones((3, math.prod(agent.spec.obs_shape)))
        policy = agent.actor.apply(state.params.actor, obs)
        assert type(policy).__name__ == kind
        assert policy.log_prob(policy.mode()).shape == (3,)
        if not agent.spec.discrete:
            np.testing.assert_allclose(policy.scale_diag, np.ones((3, 1)))
            model = ppo.SavedModel(state.params, state.obs_rms)
            big = 1e6 * jnp.ones((3, 3))  # the mean action is clipped to Pendulum's [-2, 2]
            action = ppo.greedy_action(agent, model, big)
            assert float(jnp.abs(action).max()) <= 2.0


def test_running_mean_std_matches_numpy():
    data = np.random.default_rng(0).normal(3.0, 2.0, size=(300, 2)).astype(np.float32)
    rms = ppo.rms_init((2,))
    for chunk in np.split(data, 3):
        rms = ppo.rms_update(rms, jnp.asarray(chunk))
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-4)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-3)


def test_learning_rate_anneals_linearly_to_zero():
    args = ppo.Flags(**TINY)  # 5 iterations
    rates = [float(ppo.annealed_learning_rate(args, jnp.asarray(u), 5)) for u in range(5)]
    np.testing.assert_allclose(rates, [2.5e-4 * (1 - u / 5) for u in range(5)], rtol=1e-6)


def test_derived_sizes_are_not_flags():
    agent = tiny()
    assert agent.sizes == ppo.Sizes(batch_size=16, minibatch_size=8, num_iterations=5)
    flags = {f.name for f in dataclasses.fields(ppo.Args)}
    assert not flags & set(ppo.Sizes._fields)


# --- shapes under jit and vmap; chunks equal the single program ------------------------


def test_vmapped_init_runs_each_qr_unbatched_with_the_same_parameters():
    for env_id, network in (("CartPole-v1", "mlp"), ("Pendulum-v1", "mlp"), ("Breakout-MinAtar", "cnn")):
        agent = tiny(env_id=env_id, network=network)
        check_vmapped_init(lambda key, agent=agent: ppo.init_state(agent, key))


@pytest.mark.parametrize(
    ("env_id", "network"),
    [
        ("CartPole-v1", "mlp"),
        ("Pendulum-v1", "mlp"),
        ("Breakout-MinAtar", "cnn"),  # the MLP flattens a board: test_contract's Catch-bsuite test traces it
    ],
)
def test_train_shapes_under_jit_and_vmap(env_id, network):
    args = ppo.Flags(**TINY, env_id=env_id, network=network)
    agent = ppo.build_setup(args)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(ppo.make_train(args)))(keys)
    assert state.obs.shape == (3, args.num_envs, math.prod(agent.spec.obs_shape))
    assert metrics.value_loss.shape == (3, agent.sizes.num_iterations)
    assert bool(jnp.all(jnp.isfinite(metrics.value_loss)))
    # at least one gradient step was taken: the parameters moved
    init_params = jax.jit(jax.vmap(lambda key: ppo.init_state(agent, key)))(keys).params
    assert not tree_equal(init_params, state.params)
    if network == "cnn":  # 3 seeds x the 3x3 conv on C = 4 channels as a [9C, 16] kernel
        assert init_params.actor["params"]["Conv3x3_0"]["Dense_0"]["kernel"].shape == (3, 36, 16)
    assert not np.allclose(metrics.value_loss[0], metrics.value_loss[1])  # independent seeds


def test_cnn_torso_is_a_3x3_valid_convolution():
    class Torso(nn.Module):
        @nn.compact
        def __call__(self, obs):
            return ppo.torso(obs, (10, 10, 4), 8, "cnn")

    obs = jax.random.bernoulli(jax.random.PRNGKey(0), 0.3, (5, 400)).astype(jnp.float32)
    params = Torso().init(jax.random.PRNGKey(1), obs)["params"]
    conv, dense = params["Conv3x3_0"]["Dense_0"], params["Dense_0"]
    image = obs.reshape(5, 10, 10, 4)
    kernel = conv["kernel"].reshape(3, 3, 4, 16)  # [9C, 16] -> [H, W, C_in, C_out]
    layout = ("NHWC", "HWIO", "NHWC")
    expected = jax.lax.conv_general_dilated(image, kernel, (1, 1), "VALID", dimension_numbers=layout)
    expected = jax.nn.relu(expected + conv["bias"]).reshape(5, -1)
    expected = jax.nn.relu(expected @ dense["kernel"] + dense["bias"])
    np.testing.assert_allclose(Torso().apply({"params": params}, obs), expected, rtol=1e-5, atol=1e-5)


def test_chunked_run_equals_single_program():
    """The CLI's compiled chunks (the last one partly masked) train as make_train does."""
    args = ppo.Flags(**TINY)  # 5 iterations -> chunks of 2, the last one skips one iteration
    algo = ppo.make_algorithm(args)
    key = jax.random.PRNGKey(7)
    final, _ = jax.jit(ppo.make_train(args))(key)
    state, metrics = run_in_chunks(ppo, algo, key, 3)
    chunk_metrics = metrics[-1]
    assert bool(jnp.isnan(chunk_metrics.value_loss[-1])) and not bool(jnp.isnan(chunk_metrics.value_loss[0]))
    for a, b in zip(jax.tree.leaves(final.params), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_target_kl_logs_the_last_epoch_that_ran():
    """--target-kl 0 stops every iteration after its first epoch. The skipped epochs have no
    losses; the metrics are those of the epoch that ran (they used to be the skipped epoch's NaN,
    which stopped the CLI with "non-finite loss or parameters at update 0")."""
    args = ppo.Flags(**{**TINY, "update_epochs": 4}, target_kl=0.0)
    _, metrics = jax.jit(ppo.make_train(args))(jax.random.PRNGKey(0))
    for name in ("value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac"):
        assert bool(jnp.all(jnp.isfinite(getattr(metrics, name)))), name
    # and the early stop is real: one epoch of 2 minibatch steps moves less than four epochs
    agent = ppo.build_setup(args)
    start = ppo.init_state(agent, jax.random.PRNGKey(0))
    once, _ = jax.jit(lambda s: ppo.iteration(agent, s, jnp.asarray(0)))(start)
    full_agent = ppo.build_setup(ppo.Flags(**{**TINY, "update_epochs": 4}))
    full, _ = jax.jit(lambda s: ppo.iteration(full_agent, s, jnp.asarray(0)))(start)

    def moved(state: ppo.RunnerState) -> float:
        change = jax.tree.map(lambda a, b: jnp.abs(a - b).sum(), state.params, start.params)
        return float(sum(jax.tree.leaves(change)))

    assert 0 < moved(once) < moved(full)


# --- time-limit handling on a probe environment ----------------------------------------


@pytest.mark.parametrize("continuous", [False, True])
def test_value_bootstraps_through_time_limit(continuous):
    """Constant reward 1, only time-limit ends: V must reach 1/(1-gamma) = 2, not ~1.6."""
    env = ConstantRewardProbe(continuous=continuous)
    spec = ppo.env_spec(env, env.default_params)
    args = ppo.Flags(
        num_envs=4,
        num_steps=16,
        total_timesteps=64 * 150,
        gamma=0.5,
        learning_rate=1e-2,
        anneal_lr=False,
        ent_coef=0.0,
    )
    agent = ppo.build_setup(args)._replace(spec=spec)
    agent = agent._replace(actor=ppo.Actor(spec, args.hidden_size), critic=ppo.Critic(spec, args.hidden_size))
    num_iterations = agent.sizes.num_iterations

    def train(key):
        return jax.lax.scan(
            lambda s, i: ppo.iteration(agent, s, i), ppo.init_state(agent, key), jnp.arange(num_iterations)
        )

    state, _ = jax.jit(train)(jax.random.PRNGKey(0))
    value = agent.critic.apply(state.params.critic, jnp.ones((1, 1)))
    np.testing.assert_allclose(value, [2.0], atol=0.05)


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_cartpole_is_solved_by_the_readme_command_config():
    """`--env-id CartPole-v1 --num-envs 8` (500k steps): seeds 1, 2, 3 each evaluate >= 475."""
    args = ppo.Flags(num_envs=8)
    algo = ppo.make_algorithm(args)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (1, 2, 3)])
    state, _ = jax.jit(jax.vmap(ppo.make_train(args)))(keys)

    def evaluate(state, key):
        return ppo.evaluate_episodes(algo, 32, algo.model(state), key)

    result = jax.jit(jax.vmap(evaluate))(state, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    means = np.asarray(result.returns).mean(axis=1)
    assert (means >= 475).all(), means
