"""Tests of vibe_rl/ppo_jax_scan.py: math, shapes, probe, CLI, resume, bad input, learning."""

from __future__ import annotations

import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    ConstantRewardProbe,
    check_bad_input,
    check_gif,
    check_run_dir,
    check_vmapped_init,
    fake_run_dir,
    interrupt_after_compiling,
    load_script,
    only_run_dir,
    run_script,
    run_with_every_output,
    start_script,
    tree_equal,
)

ppo = load_script("ppo_jax_scan")

TINY = dict(num_envs=2, num_steps=8, total_timesteps=80, num_minibatches=2, update_epochs=2)


def tiny_args(**overrides) -> ppo.Args:
    return ppo.validate_args(ppo.Args(**{**TINY, **overrides}))


# --- math against hand-computed values -------------------------------------------------


def test_gae_hand_computed_with_termination_and_truncation():
    # gamma 0.9, lambda 0.8. Env 0: step 1 terminates, step 2 is truncated (bootstrap from
    # V(final_obs) = 10). Env 1: same, but step 1 is terminated AND truncated:
    # termination wins, so its final value 8 must be ignored.
    rewards = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    values = jnp.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5], [2.0, 2.0]])
    terminated = jnp.array([[0, 0], [1, 1], [0, 0], [0, 0]], bool)
    truncated = jnp.array([[0, 0], [0, 1], [1, 1], [0, 0]], bool)
    final_values = jnp.array([[7.0, 7.0], [8.0, 8.0], [10.0, 10.0], [9.0, 9.0]])
    last_value = jnp.array([3.0, 3.0])
    advantages, returns = ppo.compute_gae(
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


def test_distributions_against_closed_forms():
    logits = jnp.array([[1.0, 2.0, 0.5]])
    p = np.exp(logits[0]) / np.exp(logits[0]).sum()
    dist = ppo.Categorical(logits)
    np.testing.assert_allclose(dist.log_prob(jnp.array([1])), np.log(p[1])[None], rtol=1e-6)
    np.testing.assert_allclose(dist.entropy(), [-(p * np.log(p)).sum()], rtol=1e-6)

    mean, log_std = jnp.array([[0.5, -1.0]]), jnp.array([0.1, -0.3])
    gauss = ppo.DiagGaussian(mean, log_std)
    action = jnp.array([[0.0, 0.0]])
    std = np.exp(np.asarray(log_std))
    density = np.exp(-0.5 * ((0 - np.asarray(mean[0])) / std) ** 2) / (std * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(gauss.log_prob(action), [np.log(density).sum()], rtol=1e-5)
    np.testing.assert_allclose(gauss.entropy(), [np.sum(0.5 * np.log(2 * np.pi * np.e * std**2))], rtol=1e-5)


def test_running_mean_std_matches_numpy():
    data = np.random.default_rng(0).normal(3.0, 2.0, size=(300, 2)).astype(np.float32)
    rms = ppo.rms_init((2,))
    for chunk in np.split(data, 3):
        rms = ppo.rms_update(rms, jnp.asarray(chunk))
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-4)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-3)


def test_learning_rate_anneals_linearly_to_zero():
    args = tiny_args()  # 5 updates
    rates = [float(ppo.annealed_learning_rate(args, jnp.asarray(u))) for u in range(5)]
    np.testing.assert_allclose(rates, [2.5e-4 * (1 - u / 5) for u in range(5)], rtol=1e-6)


# --- shapes under jit and vmap; chunks equal the single program ------------------------


def test_vmapped_init_runs_each_qr_unbatched_with_the_same_parameters():
    for env_id, network in (("CartPole-v1", "mlp"), ("Pendulum-v1", "mlp"), ("Breakout-MinAtar", "cnn")):
        args = tiny_args(env_id=env_id, network=network)
        check_vmapped_init(ppo.build_ppo(args, ppo.make_env(env_id)).init)


@pytest.mark.parametrize(
    ("env_id", "action_shape", "network"),
    [
        ("CartPole-v1", (), "mlp"),
        ("Pendulum-v1", (1,), "mlp"),
        ("Breakout-MinAtar", (), "mlp"),
        ("Breakout-MinAtar", (), "cnn"),
    ],
)
def test_train_shapes_under_jit_and_vmap(env_id, action_shape, network):
    args = tiny_args(env_id=env_id, network=network)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(ppo.make_train(args)))(keys)
    spec = ppo.make_env(env_id)
    assert state.obs.shape == (3, args.num_envs, spec.obs_dim)
    assert metrics.value_loss.shape == (3, args.num_iterations)
    assert bool(jnp.all(jnp.isfinite(metrics.value_loss)))
    assert state.update.tolist() == [args.num_iterations] * 3
    # at least one gradient step was taken: the parameters moved
    init_params = jax.vmap(ppo.build_ppo(args, spec).init)(keys).params
    assert not tree_equal(init_params, state.params)
    if network == "cnn":  # 3 seeds x the 3x3 conv on C = 4 channels as a [9C, 16] kernel
        assert init_params.actor["params"]["Dense_0"]["kernel"].shape == (3, 36, 16)
    # seeds are independent runs
    assert not np.allclose(metrics.value_loss[0], metrics.value_loss[1])
    if not spec.discrete:
        assert spec.action_low.shape == action_shape


def test_cnn_torso_is_a_3x3_valid_convolution():
    class Torso(nn.Module):
        @nn.compact
        def __call__(self, obs):
            return ppo.cnn_layers(obs, (10, 10, 4), 8)

    obs = jax.random.bernoulli(jax.random.PRNGKey(0), 0.3, (5, 400)).astype(jnp.float32)
    params = Torso().init(jax.random.PRNGKey(1), obs)["params"]
    conv, dense = params["Dense_0"], params["Dense_1"]
    image = obs.reshape(5, 10, 10, 4)
    kernel = conv["kernel"].reshape(3, 3, 4, 16)  # [9C, 16] -> [H, W, C_in, C_out]
    layout = ("NHWC", "HWIO", "NHWC")
    expected = jax.lax.conv_general_dilated(image, kernel, (1, 1), "VALID", dimension_numbers=layout)
    expected = jax.nn.relu(expected + conv["bias"]).reshape(5, -1)
    expected = jax.nn.relu(expected @ dense["kernel"] + dense["bias"])
    np.testing.assert_allclose(Torso().apply({"params": params}, obs), expected, rtol=1e-5, atol=1e-5)


def test_chunked_run_equals_single_program():
    args = tiny_args(num_chunks=3)  # 5 updates -> chunks of 2, the last one skips one update
    spec = ppo.make_env(args.env_id)
    program = ppo.build_ppo(args, spec)
    key = jax.random.PRNGKey(7)
    final, metrics = jax.jit(program.train)(key)
    state = program.init(key)
    chunk = jax.jit(program.run_chunk)
    for c in range(args.num_chunks):
        state, chunk_metrics = chunk(state, jnp.asarray(c * args.updates_per_chunk))
    assert int(state.update) == args.num_iterations
    assert bool(jnp.isnan(chunk_metrics.value_loss[-1]))  # the skipped update
    for a, b in zip(jax.tree.leaves(final.params), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- time-limit handling on a probe environment ----------------------------------------


@pytest.mark.parametrize("continuous", [False, True])
def test_value_bootstraps_through_time_limit(continuous):
    """Constant reward 1, only time-limit ends: V must reach 1/(1-gamma) = 2, not ~1.6."""
    env = ConstantRewardProbe(continuous=continuous)
    spec = ppo.EnvSpec(
        env,
        env.default_params,
        1,
        (1,),
        1 if continuous else 2,
        not continuous,
        np.array([-1.0], np.float32),
        np.array([1.0], np.float32),
    )
    args = ppo.validate_args(
        ppo.Args(
            num_envs=4,
            num_steps=16,
            total_timesteps=64 * 150,
            gamma=0.5,
            learning_rate=1e-2,
            anneal_lr=False,
            ent_coef=0.0,
        )
    )
    state, _ = jax.jit(ppo.build_ppo(args, spec).train)(jax.random.PRNGKey(0))
    value = ppo.Critic(args.hidden_size).apply(state.params.critic, jnp.ones((1, 1)))
    np.testing.assert_allclose(value, [2.0], atol=0.05)


# --- the CLI, as a user runs it --------------------------------------------------------

CLI_TINY = [
    "--num-envs",
    "4",
    "--num-steps",
    "32",
    "--total-timesteps",
    "2048",
    "--num-chunks",
    "4",
    "--eval-episodes",
    "4",
]


def test_cli_tiny_run_writes_the_whole_run_directory(tmp_path):
    run_dir, stdout = run_with_every_output("ppo_jax_scan", CLI_TINY, tmp_path, "CartPole-v1")
    tags = list(ppo.METRIC_TAGS.values()) + ["charts/SPS"]
    evaluation = check_run_dir(run_dir, tags, total_steps=2048, exp_name="tiny")
    assert evaluation["episodes"] == 4
    check_gif(run_dir / "videos" / "eval.gif")
    assert (run_dir / "wandb").is_dir()  # --track, offline
    # the saved model loads back and evaluates
    reloaded = ppo.evaluate_saved_model(run_dir, episodes=4, seed=0)
    assert len(reloaded["returns"]) == 4 and math.isfinite(reloaded["mean"])
    assert "SPS" in stdout and "return" in stdout


def test_cli_num_seeds_writes_one_directory_per_seed(tmp_path):
    result = run_script(
        "ppo_jax_scan",
        *CLI_TINY,
        "--output-dir",
        str(tmp_path),
        "--num-seeds",
        "2",
        "--seed",
        "5",
        "--env-id",
        "Pendulum-v1",
    )
    assert result.returncode == 0, result.stderr
    names = sorted(p.name.split("__")[2] for p in tmp_path.iterdir())
    assert names == ["5", "6"]
    for run_dir in tmp_path.iterdir():
        check_run_dir(run_dir, ["charts/episodic_return", "losses/approx_kl"], 2048, "ppo_jax_scan")


# --- resume equals uninterrupted ------------------------------------------------------


def test_resume_after_sigint_equals_uninterrupted_run(tmp_path):
    flags = [
        "--num-envs",
        "4",
        "--num-steps",
        "64",
        "--total-timesteps",
        str(256 * 80),  # 40 chunks of 2 updates: the SIGINT lands long before the last one
        "--num-chunks",
        "40",
        "--eval-episodes",
        "2",
    ]
    straight = run_script("ppo_jax_scan", *flags, "--output-dir", str(tmp_path / "a"))
    assert straight.returncode == 0, straight.stderr

    interrupt_after_compiling(start_script("ppo_jax_scan", *flags, "--output-dir", str(tmp_path / "b")))
    interrupted = only_run_dir(tmp_path / "b")
    assert not (interrupted / "eval.json").exists()

    resumed = run_script("ppo_jax_scan", "--resume", str(interrupted))
    assert resumed.returncode == 0, resumed.stderr

    args = ppo.validate_args(ppo.Args(num_envs=4, num_steps=64, total_timesteps=256 * 80))
    template = ppo.build_ppo(args, ppo.make_env("CartPole-v1")).init(jax.random.PRNGKey(0))
    a = ppo.load_checkpoint(only_run_dir(tmp_path / "a"), template)
    b = ppo.load_checkpoint(interrupted, template)
    assert int(a.update) == int(b.update) == 80
    assert tree_equal(a, b), "resumed run differs from the uninterrupted one"
    # the metrics of the resumed run continue without duplicates
    steps = [
        json.loads(x)["global_step"]
        for x in (interrupted / "metrics.jsonl").read_text().splitlines()
        if "losses/value_loss" in json.loads(x)
    ]
    assert steps == sorted(set(steps)) and len(steps) == 80


# --- bad input: one line, exit status 2, before compiling -------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--env-id", "CartPole-v9"],
            "--env-id 'CartPole-v9' is not a gymnax environment; valid: CartPole-v1",
        ),
        (["--num-minibatches", "3"], "--num-minibatches 3 must divide num_envs * num_steps"),
        (["--num-envs", "0"], "--num-envs must be a positive integer"),
        (["--update-epochs", "-1"], "--update-epochs must be a positive integer"),
        (["--total-timesteps", "100"], "--total-timesteps 100 is smaller than one batch"),
        (["--resume", "/nonexistent/run"], "--resume /nonexistent/run: not a run directory"),
        (["--env-id", "DeepSea-bsuite", "--capture-video"], "--capture-video renders classic-control"),
        (["--network", "cnn"], "--network cnn needs image observations [H, W, C], CartPole-v1 gives (4,)"),
    ],
)
def test_bad_input_exits_2_with_one_line(flags, message, capsys, monkeypatch):
    check_bad_input(ppo, flags, message, monkeypatch, capsys)


def test_resume_with_conflicting_args_is_refused(tmp_path, capsys, monkeypatch):
    run_dir = fake_run_dir(tmp_path, "CartPole-v1", ppo.validate_args(ppo.Args(num_envs=8)))
    flags = ["--resume", str(run_dir), "--num-envs", "16"]
    check_bad_input(ppo, flags, "--num-envs 16 conflicts with the run's 8", monkeypatch, capsys)


def test_cli_subprocess_bad_input_exit_status():
    result = run_script("ppo_jax_scan", "--env-id", "Nope-v0", timeout=120)
    assert result.returncode == 2
    assert "is not a gymnax environment" in result.stderr and "Traceback" not in result.stderr


def test_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    result = run_script(
        "ppo_jax_scan",
        *CLI_TINY,
        "--output-dir",
        str(tmp_path),
        "--learning-rate",
        "1e38",
        "--max-grad-norm",
        "1e38",
    )
    assert result.returncode == 1
    assert "non-finite" in result.stderr and "update" in result.stderr
    assert not (only_run_dir(tmp_path) / "eval.json").exists()


# --- learning ------------------------------------------------------------------------


@pytest.mark.slow
def test_cartpole_is_solved_by_the_readme_command_config():
    """`--env-id CartPole-v1 --num-envs 8` (500k steps): seeds 1, 2, 3 each evaluate >= 475."""
    args = ppo.validate_args(ppo.Args(num_envs=8))
    spec = ppo.make_env(args.env_id)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in (1, 2, 3)])
    state, _ = jax.jit(jax.vmap(ppo.make_train(args)))(keys)
    evaluate = jax.jit(jax.vmap(ppo.make_evaluate(args, spec)))
    result = evaluate(state.params, state.obs_rms, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    means = np.asarray(result.returns).mean(axis=1)
    assert (means >= 475).all(), means
