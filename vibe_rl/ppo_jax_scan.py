"""Proximal Policy Optimization (PPO), the whole training loop compiled with jax.lax.scan.

Algorithm: Schulman et al. 2017, "Proximal Policy Optimization Algorithms"
(arXiv:1707.06347), with the 13 core implementation details of Huang et al. 2022,
"The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog track).
The details are tagged in the code as `# [PPO-k]`; docs/ppo_jax_scan.md lists them.

Discrete actions (Categorical policy) and continuous actions (diagonal Gaussian with a
state-independent log-std, actions clipped to the bounds) are chosen from the gymnax
environment's action space. The environment (gymnax) runs inside the compiled program.

Run:
    python vibe_rl/ppo_jax_scan.py --env-id CartPole-v1 --num-envs 8

Writes runs/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json, TensorBoard
events, metrics.jsonl, checkpoints/, eval.json, episodic_return.png and, on request,
{exp_name}.flax (--save-model) and videos/eval.gif (--capture-video).
Continue a stopped run exactly with --resume RUN_DIR.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal, NamedTuple

import flax.linen as nn
import flax.serialization
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.linen.initializers import constant, orthogonal
from gymnax.environments import spaces

# =====================================================================================
# 2. Arguments
# =====================================================================================


@dataclass
class Args:
    exp_name: str = Path(__file__).stem
    """the name of this experiment (part of the run directory's name)"""
    seed: int = 1
    """seed of the first run; with --num-seeds N the runs use seed, seed+1, ..."""
    num_seeds: int = 1
    """number of independent runs trained together in one vmapped program"""
    track: bool = False
    """mirror the metrics to Weights & Biases (works with WANDB_MODE=offline)"""
    wandb_project_name: str = "vibe_rl"
    """the wandb project name"""
    wandb_entity: str | None = None
    """the wandb entity (team)"""
    capture_video: bool = False
    """write videos/eval.gif: one deterministic evaluation episode"""
    save_model: bool = False
    """write the final parameters to {run_dir}/{exp_name}.flax"""
    output_dir: str = "runs"
    """parent directory of the run directories"""
    resume: str | None = None
    """continue the run stored in this run directory from its last checkpoint"""
    num_chunks: int = 10
    """the training is run as this many compiled chunks; logs and checkpoints between"""
    eval_episodes: int = 32
    """episodes of the final deterministic evaluation (run in parallel)"""

    # Algorithm specific arguments (CleanRL ppo.py defaults: they solve CartPole-v1)
    env_id: str = "CartPole-v1"
    """the id of the gymnax environment"""
    total_timesteps: int = 500_000
    """total environment steps of the training (per seed)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """linearly anneal the learning rate to 0 over the training"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda of generalized advantage estimation"""
    num_minibatches: int = 4
    """the number of minibatches per epoch"""
    update_epochs: int = 4
    """the number of epochs over the rollout per update"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss around the old values"""
    ent_coef: float = 0.01
    """coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum global norm of the gradient"""
    target_kl: float | None = None
    """skip the remaining epochs of an update once approx_kl exceeds this"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of the critic (cnn: of its dense layer)"""
    network: Literal["mlp", "cnn"] = "mlp"
    """torso of actor and critic: mlp (flattened obs) or cnn (MinAtar images: 3x3 conv, then dense)"""
    normalize_obs: bool = False
    """normalise observations by running mean and std (clipped to +-10)"""
    normalize_reward: bool = False
    """scale rewards by the running std of the discounted return (clipped to +-10)"""

    # Filled in at runtime
    batch_size: int = 0
    """(derived) num_envs * num_steps"""
    minibatch_size: int = 0
    """(derived) batch_size // num_minibatches"""
    num_iterations: int = 0
    """(derived) number of PPO updates: total_timesteps // batch_size"""
    updates_per_chunk: int = 0
    """(derived) updates in one compiled chunk: ceil(num_iterations / num_chunks)"""


class ArgsError(ValueError):
    """A bad command-line value, reported before anything compiles (exit status 2)."""


def validate_args(args: Args) -> Args:
    """Check every knob and compute the derived sizes, in this one place."""
    for name in (
        "num_seeds",
        "num_chunks",
        "eval_episodes",
        "total_timesteps",
        "num_envs",
        "num_steps",
        "num_minibatches",
        "update_epochs",
        "hidden_size",
    ):
        if getattr(args, name) <= 0:
            flag = "--" + name.replace("_", "-")
            raise ArgsError(f"{flag} must be a positive integer, got {getattr(args, name)}")
    if args.env_id not in gymnax.registered_envs:
        valid = ", ".join(gymnax.registered_envs)
        raise ArgsError(f"--env-id {args.env_id!r} is not a gymnax environment; valid: {valid}")
    env, env_params = gymnax.make(args.env_id)
    action_space = env.action_space(env_params)
    if not isinstance(action_space, (spaces.Discrete, spaces.Box)):
        raise ArgsError(
            f"--env-id {args.env_id}: action space {type(action_space).__name__} is not "
            "supported (PPO here handles Discrete and Box)"
        )
    obs_shape = env.observation_space(env_params).shape
    if args.network == "cnn" and len(obs_shape) != 3:
        raise ArgsError(f"--network cnn needs image observations [H, W, C], {args.env_id} gives {obs_shape}")
    if args.capture_video and not (args.env_id in CLASSIC_CONTROL or args.env_id.endswith("MinAtar")):
        raise ArgsError(f"--capture-video renders classic-control and MinAtar envs, not {args.env_id}")
    if args.capture_video and args.env_id in CLASSIC_CONTROL:
        try:
            import pygame  # noqa: F401  (gymnasium's classic-control renderer draws with it)
        except ImportError as error:
            raise ArgsError(
                "--capture-video needs pygame for classic-control envs: pip install pygame"
            ) from error
    if not 0.0 <= args.gamma <= 1.0 or not 0.0 <= args.gae_lambda <= 1.0:
        raise ArgsError("--gamma and --gae-lambda must lie in [0, 1]")
    if args.learning_rate <= 0:
        raise ArgsError(f"--learning-rate must be positive, got {args.learning_rate}")
    args.batch_size = args.num_envs * args.num_steps
    if args.batch_size % args.num_minibatches != 0:
        raise ArgsError(
            f"--num-minibatches {args.num_minibatches} must divide num_envs * num_steps = "
            f"{args.num_envs} * {args.num_steps} = {args.batch_size}"
        )
    if args.total_timesteps < args.batch_size:
        raise ArgsError(
            f"--total-timesteps {args.total_timesteps} is smaller than one batch "
            f"(num_envs * num_steps = {args.batch_size})"
        )
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    args.num_chunks = min(args.num_chunks, args.num_iterations)
    args.updates_per_chunk = math.ceil(args.num_iterations / args.num_chunks)
    return args


# =====================================================================================
# 3. Environment
# =====================================================================================

CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")


class EnvSpec(NamedTuple):
    """What the networks and the driver need to know about the environment."""

    env: Any  # gymnax.environments.environment.Environment
    env_params: Any  # its EnvParams
    obs_dim: int  # observations are flattened: [*obs_shape] -> [obs_dim]
    obs_shape: tuple[int, ...]  # as the env gives them, e.g. [H, W, C] for MinAtar
    action_dim: int  # number of discrete actions, or A for Box actions
    discrete: bool
    action_low: np.ndarray  # [A] (unused for discrete actions)
    action_high: np.ndarray  # [A]


def make_env(env_id: str) -> EnvSpec:
    env, env_params = gymnax.make(env_id)
    obs_shape = env.observation_space(env_params).shape
    action_space = env.action_space(env_params)
    discrete = isinstance(action_space, spaces.Discrete)
    if discrete:
        action_dim, low, high = action_space.n, np.zeros(0), np.zeros(0)
    else:
        action_dim = int(np.prod(action_space.shape))
        low = np.broadcast_to(np.asarray(action_space.low, np.float32), (action_dim,))
        high = np.broadcast_to(np.asarray(action_space.high, np.float32), (action_dim,))
    obs_dim = int(np.prod(obs_shape))
    return EnvSpec(env, env_params, obs_dim, tuple(obs_shape), int(action_dim), discrete, low, high)


def flatten_obs(obs: jax.Array) -> jax.Array:
    """[N, *obs_shape] -> [N, obs_dim] (MinAtar images become vectors)."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


# =====================================================================================
# 4. Networks
# =====================================================================================


class Categorical(NamedTuple):
    """Policy over discrete actions."""

    logits: jax.Array  # [..., K]

    @staticmethod
    def noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """The randomness of `shape[:-1]` samples, drawn ahead: Gumbel noise [..., K]."""
        return jax.random.gumbel(key, shape)

    def sample(self, noise: jax.Array) -> jax.Array:
        return jnp.argmax(self.logits + noise, axis=-1)  # the Gumbel-max trick

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)

    def log_prob(self, action: jax.Array) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


class DiagGaussian(NamedTuple):
    """Policy over Box actions: independent Gaussians, log-std shared by all states."""

    mean: jax.Array  # [..., A]
    log_std: jax.Array  # [A]

    @staticmethod
    def noise(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """The randomness of `shape[:-1]` samples, drawn ahead: standard normal [..., A]."""
        return jax.random.normal(key, shape)

    def sample(self, noise: jax.Array) -> jax.Array:
        return self.mean + jnp.exp(self.log_std) * noise

    def mode(self) -> jax.Array:
        return self.mean

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def entropy(self) -> jax.Array:
        per_dim = self.log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e)  # [A]
        return jnp.broadcast_to(jnp.sum(per_dim), self.mean.shape[:-1])


def hidden_layers(x: jax.Array, width: int) -> jax.Array:
    # [PPO-2] orthogonal init, gain sqrt(2) for the tanh hidden layers, zero bias
    for _ in range(2):
        x = nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x)
        x = nn.tanh(x)
    return x


def cnn_layers(obs: jax.Array, obs_shape: tuple[int, ...], width: int) -> jax.Array:
    """[PPO-19] The MinAtar paper's torso (Young & Tian 2019): a 3x3 convolution with 16
    channels (valid padding), then one dense layer of `width`; ReLU.

    The rollout stores flat observations, so the image is rebuilt first. The convolution is
    written as a dense layer over each pixel's 3x3 patch ("im2col"): the same function as
    nn.Conv(16, (3, 3), padding="VALID") with its kernel reshaped [3, 3, C, 16] -> [9C, 16]
    (tests/test_ppo.py checks this). On XLA CPU it is much faster: one PPO update on
    Breakout-MinAtar (64 envs x 128 steps, one seed) took 1.75 s this way, 11.3 s with nn.Conv.
    """
    h, w, c = obs_shape
    image = obs.reshape(*obs.shape[:-1], h, w, c)  # [..., H, W, C]
    patches = jnp.concatenate(  # [..., H-2, W-2, 9*C], ordered (row, column, channel)
        [image[..., i : i + h - 2, j : j + w - 2, :] for i in range(3) for j in range(3)], axis=-1
    )
    conv = nn.Dense(16, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))
    x = nn.relu(conv(patches))  # [..., H-2, W-2, 16]
    x = x.reshape(*x.shape[:-3], -1)  # [..., (H-2)*(W-2)*16]
    return nn.relu(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))


def torso(obs: jax.Array, network: str, obs_shape: tuple[int, ...], width: int) -> jax.Array:
    return cnn_layers(obs, obs_shape, width) if network == "cnn" else hidden_layers(obs, width)


class Actor(nn.Module):
    """obs [..., obs_dim] -> policy distribution. [PPO-13] separate from the critic."""

    action_dim: int
    discrete: bool
    hidden_size: int = 64
    network: str = "mlp"  # "mlp" or "cnn"
    obs_shape: tuple[int, ...] = ()  # the image shape, for "cnn"

    @nn.compact
    def __call__(self, obs: jax.Array) -> Categorical | DiagGaussian:
        x = torso(obs, self.network, self.obs_shape, self.hidden_size)
        # [PPO-2] policy head gain 0.01: the initial policy is near uniform / near mean 0
        out = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(x)
        if self.discrete:
            return Categorical(out)
        # [PPO-14] state-independent log-std, a free parameter initialised to 0 (std 1)
        log_std = self.param("log_std", constant(0.0), (self.action_dim,))
        return DiagGaussian(out, log_std)


class Critic(nn.Module):
    """obs [..., obs_dim] -> state value [...]."""

    hidden_size: int = 64
    network: str = "mlp"
    obs_shape: tuple[int, ...] = ()

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = torso(obs, self.network, self.obs_shape, self.hidden_size)
        # [PPO-2] value head gain 1.0
        return nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(x)[..., 0]


# =====================================================================================
# 5. State
# =====================================================================================

Params = Any  # a flax parameter pytree


class AgentParams(NamedTuple):
    actor: Params
    critic: Params


class RunningMeanStd(NamedTuple):
    """Running mean and variance (parallel Welford), for obs and return normalisation."""

    mean: jax.Array  # [obs_dim] or []
    var: jax.Array  # same shape as mean
    count: jax.Array  # []


class RunnerState(NamedTuple):
    """Everything the training carries from one update to the next (and checkpoints)."""

    params: AgentParams
    opt_state: optax.OptState
    env_state: Any  # gymnax EnvState, batched over envs [N]
    obs: jax.Array  # [N, obs_dim] raw (unnormalised) current observations
    episode_return: jax.Array  # [N] undiscounted, unscaled return of the running episode
    episode_length: jax.Array  # [N]
    obs_rms: RunningMeanStd  # observation statistics (used when --normalize-obs)
    return_rms: RunningMeanStd  # discounted-return statistics (used when --normalize-reward)
    discounted_return: jax.Array  # [N] running discounted return, for reward scaling
    key: jax.Array
    update: jax.Array  # [] int32, number of updates done


class Transition(NamedTuple):
    """One environment step of the rollout; the scan stacks these to [T, N, ...]."""

    obs: jax.Array  # [N, obs_dim] raw observation the action was taken in
    action: jax.Array  # [N] (discrete) or [N, A] (continuous, before clipping)
    reward: jax.Array  # [N] (scaled when --normalize-reward)
    terminated: jax.Array  # [N] bool: true end of the episode, no bootstrap
    truncated: jax.Array  # [N] bool: time limit reached, bootstrap from final_obs
    final_obs: jax.Array  # [N, obs_dim] raw observation reached, before auto-reset
    episode_return: jax.Array  # [N] return of the episode that ended here (where done)
    episode_length: jax.Array  # [N]


class RolloutNoise(NamedTuple):
    """The rollout's randomness, drawn before it; the scan slices one step [N, ...] at a time."""

    action: jax.Array  # [T, N, K] Gumbel (discrete) or [T, N, A] standard normal
    env_keys: jax.Array  # [T, N, 2] the keys of each env step (and auto-reset)


class Batch(NamedTuple):
    """What one minibatch gradient step needs; leading axes [B] (flattened T*N)."""

    obs: jax.Array  # [B, obs_dim] normalised
    action: jax.Array  # [B] or [B, A]
    log_prob: jax.Array  # [B]
    value: jax.Array  # [B] old value estimates
    advantage: jax.Array  # [B]
    target: jax.Array  # [B] returns = advantage + value


class LossInfo(NamedTuple):
    value_loss: jax.Array
    policy_loss: jax.Array
    entropy: jax.Array
    old_approx_kl: jax.Array
    approx_kl: jax.Array
    clipfrac: jax.Array


class UpdateMetrics(NamedTuple):
    """Per-update metrics; train() returns them stacked to [num_iterations]."""

    episodic_return: jax.Array  # mean return of the episodes finished in this rollout (NaN: none)
    episodic_length: jax.Array
    learning_rate: jax.Array
    value_loss: jax.Array
    policy_loss: jax.Array
    entropy: jax.Array
    old_approx_kl: jax.Array
    approx_kl: jax.Array
    clipfrac: jax.Array
    explained_variance: jax.Array


# TensorBoard tag of each metric (CleanRL's names)
METRIC_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "learning_rate": "charts/learning_rate",
    "value_loss": "losses/value_loss",
    "policy_loss": "losses/policy_loss",
    "entropy": "losses/entropy",
    "old_approx_kl": "losses/old_approx_kl",
    "approx_kl": "losses/approx_kl",
    "clipfrac": "losses/clipfrac",
    "explained_variance": "losses/explained_variance",
}


# =====================================================================================
# 6. The algorithm's math: small pure functions
# =====================================================================================


def rms_init(shape: tuple[int, ...]) -> RunningMeanStd:
    return RunningMeanStd(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4))


def rms_update(rms: RunningMeanStd, x: jax.Array) -> RunningMeanStd:
    """Merge a batch x [K, *shape] into the running statistics (Chan et al. parallel update)."""
    batch_mean, batch_var, batch_count = x.mean(0), x.var(0), x.shape[0]
    delta = batch_mean - rms.mean
    total = rms.count + batch_count
    mean = rms.mean + delta * batch_count / total
    m2 = rms.var * rms.count + batch_var * batch_count + delta**2 * rms.count * batch_count / total
    return RunningMeanStd(mean, m2 / total, total)


def normalize(x: jax.Array, rms: RunningMeanStd, enabled: bool) -> jax.Array:
    """x [..., obs_dim] -> (x - mean) / std clipped to +-10, when enabled."""
    if not enabled:
        return x
    return jnp.clip((x - rms.mean) / jnp.sqrt(rms.var + 1e-8), -10.0, 10.0)


# The done convention, used by compute_gae and by the rollout:
#   terminated[t]: the episode truly ended at step t (the MDP stops): no bootstrap, the
#                  value after it is 0.
#   truncated[t]:  the time limit cut the episode at step t; the state it reached still
#                  has a value, V(final_obs[t]), read before gymnax's auto-reset.
#   Either way obs[t+1] is the first observation of a new episode, so the recursion of
#   the advantage stops at t. If both are set, termination wins.
def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    final_values: jax.Array,
    last_value: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """[PPO-5] Generalised advantage estimation over one rollout.

    rewards, values, terminated, truncated, final_values: [T, N]; last_value: [N], the
    value of the observation after the last step. Returns (advantages, returns), [T, N].
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)  # [T, N]
    # value of what followed step t inside the same episode
    next_values = jnp.where(truncated, final_values, next_values)  # [PPO-18] time limits
    next_values = jnp.where(terminated, 0.0, next_values)
    episode_continues = 1.0 - jnp.logical_or(terminated, truncated)  # [T, N]
    deltas = rewards + gamma * next_values - values  # [T, N]

    def backward(advantage_after, step):  # advantage_after: [N]
        delta, continues = step
        advantage = delta + gamma * gae_lambda * continues * advantage_after
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(last_value), (deltas, episode_continues), reverse=True
    )
    return advantages, advantages + values


def policy_loss_fn(
    new_log_prob: jax.Array,
    old_log_prob: jax.Array,
    advantages: jax.Array,
    clip_coef: float,
    norm_adv: bool,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """[PPO-8] clipped surrogate objective, negated; all inputs [B].

    Returns (loss, old_approx_kl, approx_kl, clipfrac); the last three are diagnostics.
    """
    if norm_adv:  # [PPO-7] normalise advantages per minibatch
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    log_ratio = new_log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    loss = jnp.maximum(unclipped, clipped).mean()
    # [PPO-12] debug variables: KL estimators (Schulman's k1 and k3) and clip fraction
    old_approx_kl = (-log_ratio).mean()
    approx_kl = ((ratio - 1.0) - log_ratio).mean()
    clipfrac = (jnp.abs(ratio - 1.0) > clip_coef).mean()
    return loss, old_approx_kl, approx_kl, clipfrac


def value_loss_fn(
    new_values: jax.Array, old_values: jax.Array, targets: jax.Array, clip_coef: float, clip: bool
) -> jax.Array:
    """[PPO-9] value loss 0.5 * (V - target)^2, optionally clipped around the old values."""
    unclipped = (new_values - targets) ** 2
    if not clip:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + jnp.clip(new_values - old_values, -clip_coef, clip_coef)
    return 0.5 * jnp.maximum(unclipped, (clipped_values - targets) ** 2).mean()


def explained_variance(predicted: jax.Array, target: jax.Array) -> jax.Array:
    """[PPO-12] 1 - Var(target - predicted) / Var(target); NaN when the target is constant."""
    var_target = jnp.var(target)
    return jnp.where(var_target == 0, jnp.nan, 1.0 - jnp.var(target - predicted) / var_target)


def annealed_learning_rate(args: Args, update: jax.Array) -> jax.Array:
    """[PPO-4] linear decay from learning_rate at update 0 towards 0 at the end."""
    if not args.anneal_lr:
        return jnp.asarray(args.learning_rate, jnp.float32)
    return args.learning_rate * (1.0 - update / args.num_iterations)


# =====================================================================================
# 7. make_train: the whole training as one pure function
# =====================================================================================


class PPO(NamedTuple):
    """The compiled pieces of one configuration; all pure functions of their inputs."""

    init: Callable[[jax.Array], RunnerState]  # key -> state before the first update
    update: Callable[[RunnerState], tuple[RunnerState, UpdateMetrics]]  # one PPO iteration
    run_chunk: Callable[[RunnerState, jax.Array], tuple[RunnerState, UpdateMetrics]]
    train: Callable[[jax.Array], tuple[RunnerState, UpdateMetrics]]  # key -> all updates


def build_ppo(args: Args, spec: EnvSpec) -> PPO:
    env, env_params = spec.env, spec.env_params
    actor = Actor(spec.action_dim, spec.discrete, args.hidden_size, args.network, spec.obs_shape)
    critic = Critic(args.hidden_size, args.network, spec.obs_shape)
    # [PPO-11] global gradient clipping, then [PPO-3] Adam with eps 1e-5; the (annealed)
    # learning rate is applied by hand each update, so the logged value is the one used.
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.scale_by_adam(eps=1e-5))
    num_envs, num_minibatches = args.num_envs, args.num_minibatches
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))  # [PPO-1] vectorised envs

    @jax.custom_batching.custom_vmap
    def init_params(actor_key: jax.Array, critic_key: jax.Array) -> AgentParams:
        dummy_obs = jnp.zeros((1, spec.obs_dim))
        return AgentParams(actor.init(actor_key, dummy_obs), critic.init(critic_key, dummy_obs))

    @init_params.def_vmap
    def init_params_one_seed_at_a_time(
        axis_size: int, in_batched: list[bool], actor_keys: jax.Array, critic_keys: jax.Array
    ):
        # Why not a plain vmap: the orthogonal init is a QR, and jaxlib 0.10.2's CPU QR of a
        # batch of matrices splits the batch across XLA's intra-op thread pool and blocks on
        # it. Vmapped over seeds, two such QRs (independent layers) can occupy both threads of
        # a 2-core pool and wait for each other forever. One seed at a time, each QR is
        # unbatched and runs inline; the parameters are the same bits. Both keys are split
        # from the seed's key, so both are batched: [S, 2].
        params = jax.lax.map(lambda keys: init_params(*keys), (actor_keys, critic_keys))
        return params, jax.tree.map(lambda _: True, params)

    def init(key: jax.Array) -> RunnerState:
        key, actor_key, critic_key, reset_key = jax.random.split(key, 4)
        params = init_params(actor_key, critic_key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_envs), env_params
        )
        return RunnerState(
            params=params,
            opt_state=optimizer.init(params),
            env_state=env_state,
            obs=flatten_obs(obs),  # [N, obs_dim]
            episode_return=jnp.zeros(num_envs),
            episode_length=jnp.zeros(num_envs, jnp.int32),
            obs_rms=rms_init((spec.obs_dim,)),
            return_rms=rms_init(()),
            discounted_return=jnp.zeros(num_envs),
            key=key,
            update=jnp.asarray(0, jnp.int32),
        )

    def rollout_step(state: RunnerState, noise: RolloutNoise) -> tuple[RunnerState, Transition]:
        """Act in the N environments once. Parameters and statistics stay fixed."""
        policy = actor.apply(state.params.actor, normalize(state.obs, state.obs_rms, args.normalize_obs))
        action = policy.sample(noise.action)  # [N] or [N, A]
        # [PPO-15] the env gets the action clipped to its bounds; the update uses the sample
        env_action = action if spec.discrete else jnp.clip(action, low, high)
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            noise.env_keys, state.env_state, env_action, env_params
        )
        done = jnp.logical_or(terminated, truncated)  # [N]
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        # [PPO-17] reward scaling: divide by the std of the discounted return (NormalizeReward)
        discounted_return = state.discounted_return * args.gamma + reward
        return_rms = state.return_rms
        if args.normalize_reward:
            return_rms = rms_update(return_rms, discounted_return)
            reward = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -10.0, 10.0)
        transition = Transition(
            obs=state.obs,
            action=action,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=flatten_obs(info["final_observation"]),
            episode_return=episode_return,
            episode_length=episode_length,
        )
        state = state._replace(
            env_state=env_state,
            obs=flatten_obs(next_obs),
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
            return_rms=return_rms,
            discounted_return=jnp.where(done, 0.0, discounted_return),
        )
        return state, transition

    def loss_fn(params: AgentParams, batch: Batch) -> tuple[jax.Array, LossInfo]:
        policy = actor.apply(params.actor, batch.obs)
        new_log_prob = policy.log_prob(batch.action)  # [B]
        policy_loss, old_approx_kl, approx_kl, clipfrac = policy_loss_fn(
            new_log_prob, batch.log_prob, batch.advantage, args.clip_coef, args.norm_adv
        )
        new_values = critic.apply(params.critic, batch.obs)  # [B]
        value_loss = value_loss_fn(new_values, batch.value, batch.target, args.clip_coef, args.clip_vloss)
        entropy = policy.entropy().mean()  # [PPO-10] entropy bonus
        loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss
        return loss, LossInfo(value_loss, policy_loss, entropy, old_approx_kl, approx_kl, clipfrac)

    class EpochCarry(NamedTuple):
        params: AgentParams
        opt_state: optax.OptState
        learning_rate: jax.Array  # []
        key: jax.Array
        kl_exceeded: jax.Array  # [] bool, set once approx_kl > target_kl

    def minibatch_step(carry: EpochCarry, minibatch: Batch) -> tuple[EpochCarry, LossInfo]:
        grads, info = jax.grad(loss_fn, has_aux=True)(carry.params, minibatch)
        updates, opt_state = optimizer.update(grads, carry.opt_state, carry.params)
        updates = jax.tree.map(lambda u: -carry.learning_rate * u, updates)
        params = optax.apply_updates(carry.params, updates)
        return carry._replace(params=params, opt_state=opt_state), info

    def epoch(carry: EpochCarry, batch: Batch) -> tuple[EpochCarry, LossInfo]:
        """[PPO-6] one pass over the rollout in shuffled minibatches."""
        key, perm_key = jax.random.split(carry.key)
        permutation = jax.random.permutation(perm_key, args.batch_size)  # [B]
        minibatches = jax.tree.map(  # [B, ...] -> [M, B/M, ...]
            lambda x: x[permutation].reshape(num_minibatches, -1, *x.shape[1:]), batch
        )

        def run(c: EpochCarry) -> tuple[EpochCarry, LossInfo]:
            return jax.lax.scan(minibatch_step, c, minibatches)

        def skip(c: EpochCarry) -> tuple[EpochCarry, LossInfo]:  # target_kl reached earlier
            nan = jnp.full((num_minibatches,), jnp.nan)
            return c, LossInfo(*(nan for _ in LossInfo._fields))

        carry = carry._replace(key=key)
        if args.target_kl is None:
            carry, info = run(carry)
        else:
            carry, info = jax.lax.cond(carry.kl_exceeded, skip, run, carry)
            exceeded = carry.kl_exceeded | (info.approx_kl[-1] > args.target_kl)
            carry = carry._replace(kl_exceeded=exceeded)
        return carry, info

    def update(state: RunnerState) -> tuple[RunnerState, UpdateMetrics]:
        """One PPO iteration: rollout, advantages, update_epochs of minibatch SGD."""
        rollout_start = state
        # All the rollout's randomness in two calls up front: cheaper than 2T small ones.
        key, action_key, env_key = jax.random.split(state.key, 3)
        state = state._replace(key=key)
        policy_class = Categorical if spec.discrete else DiagGaussian
        noise = RolloutNoise(
            action=policy_class.noise(action_key, (args.num_steps, num_envs, spec.action_dim)),
            env_keys=jax.random.split(env_key, (args.num_steps, num_envs)),
        )
        state, traj = jax.lax.scan(rollout_step, state, noise)  # [T, N, ...]

        # Log-probabilities and values of the whole rollout in one batched pass each: the
        # parameters did not change while acting, and one big matmul beats T small ones.
        def value(obs: jax.Array) -> jax.Array:
            return critic.apply(
                state.params.critic, normalize(obs, rollout_start.obs_rms, args.normalize_obs)
            )

        obs = normalize(traj.obs, rollout_start.obs_rms, args.normalize_obs)  # [T, N, obs_dim]
        log_probs = actor.apply(state.params.actor, obs).log_prob(traj.action)  # [T, N] log pi_old
        values = critic.apply(state.params.critic, obs)  # [T, N]
        final_values = value(traj.final_obs)  # [T, N]
        last_value = value(state.obs)  # [N]
        advantages, targets = compute_gae(
            traj.reward,
            values,
            traj.terminated,
            traj.truncated,
            final_values,
            last_value,
            args.gamma,
            args.gae_lambda,
        )
        batch = Batch(  # [T, N, ...] -> [T*N, ...]
            obs=obs,
            action=traj.action,
            log_prob=log_probs,
            value=values,
            advantage=advantages,
            target=targets,
        )
        batch = jax.tree.map(lambda x: x.reshape(args.batch_size, *x.shape[2:]), batch)

        learning_rate = annealed_learning_rate(args, state.update)
        key, epoch_key = jax.random.split(state.key)
        carry = EpochCarry(state.params, state.opt_state, learning_rate, epoch_key, jnp.asarray(False))
        carry, info = jax.lax.scan(
            lambda c, _: epoch(c, batch), carry, None, args.update_epochs
        )  # info: [E, M]

        obs_rms = state.obs_rms
        if args.normalize_obs:  # [PPO-16] statistics for the next rollout, from this one's obs
            obs_rms = rms_update(obs_rms, traj.obs.reshape(args.batch_size, -1))
        done = jnp.logical_or(traj.terminated, traj.truncated)  # [T, N]
        num_done = done.sum()
        state = state._replace(
            params=carry.params,
            opt_state=carry.opt_state,
            obs_rms=obs_rms,
            key=key,
            update=state.update + 1,
        )
        last_info = jax.tree.map(lambda x: jnp.nanmean(x[-1]), info)  # last epoch run
        metrics = UpdateMetrics(
            episodic_return=jnp.where(num_done > 0, (traj.episode_return * done).sum() / num_done, jnp.nan),
            episodic_length=jnp.where(num_done > 0, (traj.episode_length * done).sum() / num_done, jnp.nan),
            learning_rate=learning_rate,
            value_loss=last_info.value_loss,
            policy_loss=last_info.policy_loss,
            entropy=last_info.entropy,
            old_approx_kl=last_info.old_approx_kl,
            approx_kl=last_info.approx_kl,
            clipfrac=jnp.nanmean(info.clipfrac),
            explained_variance=explained_variance(batch.value, batch.target),
        )
        return state, metrics

    def run_chunk(state: RunnerState, first_update: jax.Array) -> tuple[RunnerState, UpdateMetrics]:
        """updates_per_chunk updates; those past num_iterations (last chunk) are skipped.

        first_update is not batched over seeds, so under vmap the skip stays a real branch.
        """

        def maybe_update(s: RunnerState, index: jax.Array) -> tuple[RunnerState, UpdateMetrics]:
            def skip(s: RunnerState) -> tuple[RunnerState, UpdateMetrics]:
                return s, UpdateMetrics(*(jnp.asarray(jnp.nan) for _ in UpdateMetrics._fields))

            return jax.lax.cond(index < args.num_iterations, update, skip, s)

        indices = first_update + jnp.arange(args.updates_per_chunk)
        return jax.lax.scan(maybe_update, state, indices)

    def train(key: jax.Array) -> tuple[RunnerState, UpdateMetrics]:
        return jax.lax.scan(lambda s, _: update(s), init(key), None, args.num_iterations)

    return PPO(init, update, run_chunk, train)


def make_train(args: Args) -> Callable[[jax.Array], tuple[RunnerState, UpdateMetrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds."""
    args = validate_args(args)
    return build_ppo(args, make_env(args.env_id)).train


# =====================================================================================
# 8. Evaluation
# =====================================================================================


class EvalResult(NamedTuple):
    returns: jax.Array  # [E] return of each evaluation episode
    lengths: jax.Array  # [E]
    env_states: Any  # gymnax EnvState [T_max, E]: the trajectory, for rendering


def make_evaluate(args: Args, spec: EnvSpec) -> Callable[..., EvalResult]:
    """Deterministic policy (argmax / mean action), eval_episodes episodes in parallel."""
    env, env_params = spec.env, spec.env_params
    actor = Actor(spec.action_dim, spec.discrete, args.hidden_size, args.network, spec.obs_shape)
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    num_episodes = args.eval_episodes

    class EvalCarry(NamedTuple):
        env_state: Any  # [E]
        obs: jax.Array  # [E, obs_dim]
        returns: jax.Array  # [E]
        lengths: jax.Array  # [E]
        running: jax.Array  # [E] bool, the first episode is not over yet
        key: jax.Array

    def evaluate(params: AgentParams, obs_rms: RunningMeanStd, key: jax.Array) -> EvalResult:
        reset_key, key = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_episodes), env_params
        )
        zeros = jnp.zeros(num_episodes)
        carry = EvalCarry(
            env_state, flatten_obs(obs), zeros, zeros.astype(jnp.int32), jnp.ones(num_episodes, bool), key
        )

        def step(c: EvalCarry, _: None) -> tuple[EvalCarry, Any]:
            key, step_key = jax.random.split(c.key)
            action = actor.apply(params.actor, normalize(c.obs, obs_rms, args.normalize_obs)).mode()
            if not spec.discrete:
                action = jnp.clip(action, low, high)
            obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, num_episodes), c.env_state, action, env_params
            )
            returns = c.returns + reward * c.running
            lengths = c.lengths + c.running
            running = c.running & ~(terminated | truncated)
            return EvalCarry(env_state, flatten_obs(obs), returns, lengths, running, key), c.env_state

        carry, env_states = jax.lax.scan(step, carry, None, env_params.max_steps_in_episode)
        return EvalResult(carry.returns, carry.lengths, env_states)

    return evaluate


def load_model(path: str | Path, args: Args) -> tuple[AgentParams, RunningMeanStd]:
    """Read a --save-model file back: (parameters, observation statistics)."""
    args = validate_args(args)
    spec = make_env(args.env_id)
    template = build_ppo(args, spec).init(jax.random.PRNGKey(0))
    target = {"params": template.params, "obs_rms": template.obs_rms}
    restored = flax.serialization.from_bytes(target, Path(path).read_bytes())
    return restored["params"], restored["obs_rms"]


def evaluate_saved_model(run_dir: str | Path, episodes: int = 32, seed: int = 0) -> dict[str, Any]:
    """Load {run_dir}/{exp_name}.flax and evaluate it deterministically.

    >>> evaluate_saved_model("runs/CartPole-v1__ppo_jax_scan__1__1700000000")["mean"]
    """
    run_dir = Path(run_dir)
    args = args_from_json(json.loads((run_dir / "args.json").read_text()))
    args.eval_episodes = episodes
    params, obs_rms = load_model(run_dir / f"{args.exp_name}.flax", args)
    result = jax.jit(make_evaluate(args, make_env(args.env_id)))(params, obs_rms, jax.random.PRNGKey(seed))
    return eval_summary(result)


def eval_summary(result: EvalResult) -> dict[str, Any]:
    returns, lengths = np.asarray(result.returns, np.float64), np.asarray(result.lengths)
    return {
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "episodes": len(returns),
    }


# =====================================================================================
# 9. I/O: run directories, logging, checkpoints, plot, video
# =====================================================================================


def args_from_json(saved: dict[str, Any]) -> Args:
    known = {f.name for f in fields(Args)}
    return Args(**{k: v for k, v in saved.items() if k in known})


class RunLogger:
    """One run directory's metrics: TensorBoard events, metrics.jsonl and (--track) wandb."""

    def __init__(self, run_dir: Path, args: Args, seed: int):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.run_dir = run_dir
        self.events = EventFileWriter(str(run_dir))
        self.jsonl = open(run_dir / "metrics.jsonl", "a")  # noqa: SIM115 (open for the whole run)
        self.wandb_run = None
        if args.track:
            import wandb

            self.wandb_run = wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                name=run_dir.name,
                id=run_dir.name.replace("/", "_"),
                resume="allow",
                dir=str(run_dir),
                config={**asdict(args), "seed": seed},
                reinit="create_new",
            )

    def log(self, global_step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values = {tag: v for tag, v in values.items() if math.isfinite(v)}
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()]
        )
        self.events.add_event(event_pb2.Event(wall_time=time.time(), step=global_step, summary=summary))
        self.jsonl.write(json.dumps({"global_step": global_step, **values}) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({**values, "global_step": global_step})

    def close(self) -> None:
        self.events.close()
        self.jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def seed_slice(tree: Any, i: int) -> Any:
    return jax.tree.map(lambda x: np.asarray(x[i]), tree)


def save_checkpoint(run_dir: Path, state_of_seed: RunnerState) -> None:
    """Atomic: write a temporary file, then rename it over the previous checkpoint."""
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    tmp = ckpt_dir / "state.msgpack.tmp"
    tmp.write_bytes(flax.serialization.to_bytes(state_of_seed))
    os.replace(tmp, ckpt_dir / "state.msgpack")


def load_checkpoint(run_dir: Path, template_of_seed: RunnerState) -> RunnerState:
    data = (run_dir / "checkpoints" / "state.msgpack").read_bytes()
    return flax.serialization.from_bytes(template_of_seed, data)


def plot_returns(run_dir: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [p for p in points if "charts/episodic_return" in p]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["global_step"] for p in points], [p["charts/episodic_return"] for p in points])
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return (training)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(run_dir / "episodic_return.png", dpi=100)
    plt.close(fig)


def render_frames(spec: EnvSpec, env_id: str, env_states: Any, length: int) -> list[np.ndarray]:
    """RGB frames [H, W, 3] of one episode, from its gymnax states (T leading axis)."""
    states = [jax.tree.map(lambda x, t=t: np.asarray(x[t]), env_states) for t in range(length)]
    if env_id.endswith("MinAtar"):
        palette = np.array(
            [
                [0, 0, 0],
                [230, 80, 60],
                [60, 170, 230],
                [250, 200, 60],
                [120, 220, 120],
                [200, 120, 230],
                [240, 240, 240],
                [160, 110, 60],
                [90, 90, 220],
                [220, 140, 170],
                [130, 130, 130],
            ],
            np.uint8,
        )
        frames = []
        for state in states:
            grid = np.asarray(spec.env.get_obs(state, spec.env_params))  # [10, 10, C] 0/1
            channel = np.where(grid.any(-1), grid.argmax(-1) + 1, 0) % len(palette)
            frames.append(np.kron(palette[channel], np.ones((24, 24, 1), np.uint8)))
        return frames
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    import gymnasium
    from gymnax.visualize.vis_gym import get_gym_state, set_gym_params

    gym_env = gymnasium.make(env_id, render_mode="rgb_array")
    gym_env.reset(seed=0)
    set_gym_params(gym_env.unwrapped, env_id, spec.env_params)
    frames = []
    for state in states:
        gym_env.unwrapped.state = get_gym_state(state, env_id)
        if env_id == "Pendulum-v1":
            gym_env.unwrapped.last_u = np.asarray(state.last_u, np.float64)
        frames.append(gym_env.render())
    gym_env.close()
    return frames


def write_gif(path: Path, frames: list[np.ndarray], fps: int = 30) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)


# =====================================================================================
# 10. main: a thin Python driver around the compiled chunks
# =====================================================================================

# Flags that may differ between a run and its --resume (they do not change the training).
RESUME_OVERRIDABLE = {
    "resume",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "eval_episodes",
}
DERIVED = {"batch_size", "minibatch_size", "num_iterations", "updates_per_chunk"}


def fail(message: str) -> None:
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def resolve_run_dirs(args: Args) -> tuple[Args, list[Path]]:
    """New run: create one directory per seed. Resume: reload and check the saved Args.

    Every directory of a multi-seed run stores the same Args (seed = the first seed) plus
    its own "run_seed", so resuming any one of them continues all of them.
    """
    if args.resume is None:
        stamp = int(time.time())
        run_dirs = []
        for run_seed in range(args.seed, args.seed + args.num_seeds):
            run_dir = Path(args.output_dir) / f"{args.env_id}__{args.exp_name}__{run_seed}__{stamp}"
            run_dir.mkdir(parents=True, exist_ok=False)
            (run_dir / "args.json").write_text(json.dumps({**asdict(args), "run_seed": run_seed}, indent=2))
            run_dirs.append(run_dir)
        return args, run_dirs

    resume_dir = Path(args.resume)
    if (
        not (resume_dir / "checkpoints" / "state.msgpack").is_file()
        or not (resume_dir / "args.json").is_file()
    ):
        raise ArgsError(
            f"--resume {resume_dir}: not a run directory with args.json and checkpoints/state.msgpack"
        )
    saved = args_from_json(json.loads((resume_dir / "args.json").read_text()))
    defaults = Args()
    for f in fields(Args):
        given, before = getattr(args, f.name), getattr(saved, f.name)
        if f.name in RESUME_OVERRIDABLE | DERIVED or given in (getattr(defaults, f.name), before):
            continue
        raise ArgsError(
            f"--resume {resume_dir}: --{f.name.replace('_', '-')} {given} conflicts with the run's {before}"
        )
    for name in RESUME_OVERRIDABLE:
        setattr(saved, name, getattr(args, name))
    env_id, exp_name, _, stamp = resume_dir.name.split("__")
    run_dirs = [
        resume_dir.parent / f"{env_id}__{exp_name}__{run_seed}__{stamp}"
        for run_seed in range(saved.seed, saved.seed + saved.num_seeds)
    ]
    for run_dir in run_dirs:
        if not (run_dir / "checkpoints" / "state.msgpack").is_file():
            raise ArgsError(
                f"--resume {resume_dir}: the run has {saved.num_seeds} seeds but {run_dir} has no checkpoint"
            )
    return saved, run_dirs


def initial_state(ppo: PPO, args: Args, run_dirs: list[Path]) -> RunnerState:
    """Fresh state for every seed, or the seeds' checkpoints with --resume. Leaves: [S, ...]."""
    keys = jnp.stack([jax.random.PRNGKey(seed_of(d)) for d in run_dirs])  # [S, 2]
    state = jax.jit(jax.vmap(ppo.init))(keys)
    if args.resume is None:
        return state
    template = seed_slice(state, 0)
    restored = [load_checkpoint(d, template) for d in run_dirs]
    state = jax.tree.map(lambda *xs: jnp.stack(xs), *restored)
    for run_dir in run_dirs:  # drop points logged after the checkpoint
        path = run_dir / "metrics.jsonl"
        if path.exists():
            last_step = int(state.update[0]) * args.batch_size
            lines = [x for x in path.read_text().splitlines() if json.loads(x)["global_step"] <= last_step]
            path.write_text("".join(line + "\n" for line in lines))
    return state


def seed_of(run_dir: Path) -> int:
    return int(run_dir.name.split("__")[2])


def check_finite(metrics: UpdateMetrics, state: RunnerState, first_update: int, num_valid: int) -> None:
    """Stop on a non-finite loss or parameter; the last checkpoint (before this chunk) stays."""
    losses = np.stack([metrics.value_loss, metrics.policy_loss])[:, :, :num_valid]  # [2, S, U]
    params_finite = all(bool(np.isfinite(x).all()) for x in jax.tree.leaves(state.params))
    if np.isfinite(losses).all() and params_finite:
        return
    bad = np.flatnonzero(~np.isfinite(losses).all(axis=(0, 1)))
    bad_update = first_update + (int(bad[0]) if len(bad) else num_valid - 1)
    print(
        f"error: non-finite loss or parameters at update {bad_update}; stopping. The last good "
        f"checkpoint (after update {first_update}) is kept.",
        file=sys.stderr,
    )
    sys.exit(1)


def print_progress(args: Args, metrics: UpdateMetrics, step: int, num_valid: int, sps: float, elapsed: float):
    recent = metrics.episodic_return[:, :num_valid]  # [S, U]; the last quarter of the chunk
    latest = np.nanmean(recent[:, -max(1, num_valid // 4) :]) if np.isfinite(recent).any() else np.nan
    total = args.num_iterations * args.batch_size
    filled = int(20 * step / total)
    print(
        f"[{'#' * filled}{'-' * (20 - filled)}] {step:>10,}/{total:,} steps | {sps:,.0f} SPS | "
        f"return {latest:8.2f} | {elapsed:6.1f}s",
        flush=True,
    )


def finish_run(args: Args, spec: EnvSpec, state: RunnerState, run_dirs: list[Path], loggers: list[RunLogger]):
    """Final deterministic evaluation of every seed in one program; eval.json, plot, model, video."""
    evaluate = jax.jit(jax.vmap(make_evaluate(args, spec)))
    eval_keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(seed_of(d)), 1) for d in run_dirs])
    result = evaluate(state.params, state.obs_rms, eval_keys)
    for i, (run_dir, logger) in enumerate(zip(run_dirs, loggers, strict=True)):
        summary = eval_summary(EvalResult(result.returns[i], result.lengths[i], None))
        summary["global_step"] = args.num_iterations * args.batch_size
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        logger.log(summary["global_step"], {"eval/episodic_return": summary["mean"]})
        logger.close()
        plot_returns(run_dir, f"PPO on {args.env_id}, seed {seed_of(run_dir)}")
        if args.save_model:
            model = {"params": seed_slice(state.params, i), "obs_rms": seed_slice(state.obs_rms, i)}
            (run_dir / f"{args.exp_name}.flax").write_bytes(flax.serialization.to_bytes(model))
        if args.capture_video:
            first_episode = jax.tree.map(lambda x: x[:, 0], seed_slice(result.env_states, i))  # [T_max]
            frames = render_frames(spec, args.env_id, first_episode, int(result.lengths[i][0]))
            write_gif(run_dir / "videos" / "eval.gif", frames)
        print(
            f"{run_dir}: eval return {summary['mean']:.2f} +- {summary['std']:.2f} "
            f"over {summary['episodes']} episodes"
        )


def main() -> None:
    args = tyro.cli(Args)
    try:  # every bad input is reported here, before anything compiles
        if args.resume is None:
            validate_args(args)
        args, run_dirs = resolve_run_dirs(args)
        validate_args(args)
    except ArgsError as error:
        fail(str(error))

    spec = make_env(args.env_id)
    ppo = build_ppo(args, spec)
    state = initial_state(ppo, args, run_dirs)
    loggers = [RunLogger(d, args, seed_of(d)) for d in run_dirs]

    stop_signal: list[int] = []  # Ctrl-C / SIGTERM (from here on): finish the chunk, checkpoint, exit

    def request_stop(signum: int, _frame: Any) -> None:
        stop_signal.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing")

    previous_handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}

    # One chunk shape, compiled once. The state is not donated: on XLA CPU (jax 0.10.2)
    # donating it made the chunk 35-50% slower (measured), for a saving of one state's memory.
    run_chunk = jax.jit(jax.vmap(ppo.run_chunk, in_axes=(0, None)))
    compile_start = time.perf_counter()
    compiled = run_chunk.lower(state, jnp.asarray(0, jnp.int32)).compile()
    compile_seconds = time.perf_counter() - compile_start
    print(
        f"compiled one chunk ({args.updates_per_chunk} updates x {args.batch_size} steps, "
        f"{len(run_dirs)} seed(s)) in {compile_seconds:.1f}s"
    )

    train_start = time.perf_counter()
    first_chunk = int(state.update[0]) // args.updates_per_chunk
    steps_trained = 0
    for chunk in range(first_chunk, args.num_chunks):
        first_update = chunk * args.updates_per_chunk
        chunk_start = time.perf_counter()
        state, metrics = compiled(state, jnp.asarray(first_update, jnp.int32))
        metrics = jax.tree.map(np.asarray, metrics)  # [S, updates_per_chunk]
        chunk_seconds = time.perf_counter() - chunk_start
        num_valid = min(args.updates_per_chunk, args.num_iterations - first_update)
        check_finite(metrics, state, first_update, num_valid)

        sps = num_valid * args.batch_size / chunk_seconds  # per seed
        for i, logger in enumerate(loggers):
            for u in range(num_valid):
                values = {tag: float(getattr(metrics, name)[i, u]) for name, tag in METRIC_TAGS.items()}
                if u == num_valid - 1:
                    values["charts/SPS"] = sps
                logger.log((first_update + u + 1) * args.batch_size, values)
            logger.jsonl.flush()
            save_checkpoint(run_dirs[i], seed_slice(state, i))

        steps_trained += num_valid * args.batch_size
        elapsed = time.perf_counter() - train_start
        step = (first_update + num_valid) * args.batch_size
        print_progress(args, metrics, step, num_valid, steps_trained / elapsed, elapsed)
        if stop_signal and chunk < args.num_chunks - 1:
            for logger in loggers:
                logger.close()
            print(
                f"stopped after update {first_update + num_valid}; checkpoint saved. "
                f"Continue with: python {sys.argv[0]} --resume {run_dirs[0]}"
            )
            sys.exit(128 + stop_signal[0])
    for s, handler in previous_handlers.items():
        signal.signal(s, handler)
    train_seconds = time.perf_counter() - train_start
    print(
        f"trained {steps_trained:,} steps x {len(run_dirs)} seed(s) in {train_seconds:.2f}s "
        f"({steps_trained / train_seconds:,.0f} SPS per seed), compile {compile_seconds:.2f}s"
    )
    finish_run(args, spec, state, run_dirs, loggers)


if __name__ == "__main__":
    main()
