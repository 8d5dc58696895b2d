"""Soft Actor-Critic (SAC) for continuous actions, the whole training compiled with jax.lax.scan.

Algorithm: Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor" (arXiv:1801.01290) and "Soft Actor-Critic
Algorithms and Applications" (arXiv:1812.05905: twin Q critics, automatic entropy
tuning), following CleanRL's sac_continuous_action.py: delayed policy updates, Polyak
target critics, a tanh-squashed Gaussian actor whose actions are rescaled to the bounds.
The implementation details are tagged in the code as `# [SAC-k]`; docs/sac_jax.md lists them.

The replay buffer is a fixed-size JAX pytree carried through the scan, next to the
networks, the optimiser states and the gymnax environments: one environment step of N
envs and one gradient step form one iteration, and every iteration runs in the compiled
program.

Run:
    python vibe_rl/sac_jax.py --env-id Pendulum-v1

Writes runs/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json, TensorBoard
events, metrics.jsonl, checkpoints/ (replay buffer included), eval.json,
episodic_return.png and, on request, {exp_name}.flax (--save-model) and videos/eval.gif
(--capture-video). Continue a stopped run exactly with --resume RUN_DIR.
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
from typing import Any, NamedTuple

import flax.linen as nn
import flax.serialization
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
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
    log_frequency: int = 100
    """the losses are logged every this many iterations, averaged over them (CleanRL: 100)"""

    # Algorithm specific arguments (CleanRL sac_continuous_action.py defaults, except
    # env_id, total_timesteps and buffer_size: see docs/sac_jax.md)
    env_id: str = "Pendulum-v1"
    """the id of the gymnax environment (continuous actions)"""
    total_timesteps: int = 50_000
    """total environment steps of the training (per seed)"""
    num_envs: int = 1
    """the number of parallel environments; one gradient step per step of all of them"""
    buffer_size: int = 100_000
    """the replay memory buffer size (transitions)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient: target <- tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    learning_starts: int = 5_000
    """environment steps of uniformly random actions before the first gradient step"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer (and of the entropy coefficient)"""
    policy_frequency: int = 2
    """the frequency of training the policy (delayed): that many actor updates every that many steps"""
    target_network_frequency: int = 1
    """the frequency of the Polyak updates of the target critics (in iterations)"""
    alpha: float = 0.2
    """entropy regularization coefficient (used when --no-autotune)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient toward the target entropy -|A|"""
    hidden_size: int = 256
    """width of the two hidden layers of the actor and of each critic"""

    # Filled in at runtime
    num_iterations: int = 0
    """(derived) iterations (one step of all envs + one gradient step): total_timesteps // num_envs"""
    buffer_rows: int = 0
    """(derived) rows of the replay buffer, each one step of all envs: buffer_size // num_envs"""
    iterations_per_chunk: int = 0
    """(derived) iterations in one compiled chunk: ceil(num_iterations / num_chunks)"""


class ArgsError(ValueError):
    """A bad command-line value, reported before anything compiles (exit status 2)."""


def validate_args(args: Args) -> Args:
    """Check every knob and compute the derived sizes, in this one place."""
    for name in (
        "num_seeds",
        "num_chunks",
        "eval_episodes",
        "log_frequency",
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "batch_size",
        "policy_frequency",
        "target_network_frequency",
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
    if not isinstance(action_space, spaces.Box):
        raise ArgsError(
            f"--env-id {args.env_id}: SAC here needs continuous (Box) actions, this env has "
            f"{type(action_space).__name__} actions; use dqn_jax.py or ppo_jax_scan.py for it"
        )
    if args.capture_video and args.env_id not in CLASSIC_CONTROL:
        raise ArgsError(f"--capture-video renders the classic-control envs, not {args.env_id}")
    if args.capture_video:
        try:
            import pygame  # noqa: F401  (gymnasium's classic-control renderer draws with it)
        except ImportError as error:
            raise ArgsError(
                "--capture-video needs pygame for classic-control envs: pip install pygame"
            ) from error
    if not 0.0 <= args.gamma <= 1.0:
        raise ArgsError(f"--gamma must lie in [0, 1], got {args.gamma}")
    if not 0.0 < args.tau <= 1.0:
        raise ArgsError(f"--tau must lie in (0, 1], got {args.tau}")
    for name in ("policy_lr", "q_lr"):
        if getattr(args, name) <= 0:
            raise ArgsError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.alpha < 0:
        raise ArgsError(f"--alpha must be non-negative, got {args.alpha}")
    if args.learning_starts < 0:
        raise ArgsError(f"--learning-starts must be non-negative, got {args.learning_starts}")
    if args.buffer_size < args.num_envs:
        raise ArgsError(f"--buffer-size {args.buffer_size} is smaller than --num-envs {args.num_envs}")
    if args.total_timesteps < args.num_envs:
        raise ArgsError(
            f"--total-timesteps {args.total_timesteps} is smaller than one step of --num-envs {args.num_envs}"
        )
    args.num_iterations = args.total_timesteps // args.num_envs
    if args.learning_starts >= args.num_iterations * args.num_envs:
        raise ArgsError(
            f"--learning-starts {args.learning_starts} must be smaller than --total-timesteps "
            f"{args.total_timesteps}: no gradient step would be taken"
        )
    args.buffer_rows = args.buffer_size // args.num_envs
    args.num_chunks = min(args.num_chunks, args.num_iterations)
    args.iterations_per_chunk = math.ceil(args.num_iterations / args.num_chunks)
    return args


# =====================================================================================
# 3. Environment
# =====================================================================================

CLASSIC_CONTROL = ("Pendulum-v1", "MountainCarContinuous-v0")


class EnvSpec(NamedTuple):
    """What the networks and the driver need to know about the environment."""

    env: Any  # gymnax.environments.environment.Environment
    env_params: Any  # its EnvParams
    obs_dim: int  # observations are flattened: [*obs_shape] -> [obs_dim]
    action_dim: int  # A
    action_low: np.ndarray  # [A]
    action_high: np.ndarray  # [A]


def make_env(env_id: str) -> EnvSpec:
    env, env_params = gymnax.make(env_id)
    return env_spec(env, env_params)


def env_spec(env: Any, env_params: Any) -> EnvSpec:
    """The EnvSpec of any gymnax environment with Box actions (probe envs included)."""
    obs_shape = env.observation_space(env_params).shape
    action_space = env.action_space(env_params)
    action_dim = int(np.prod(action_space.shape))
    low = np.broadcast_to(np.asarray(action_space.low, np.float32), (action_dim,))
    high = np.broadcast_to(np.asarray(action_space.high, np.float32), (action_dim,))
    return EnvSpec(env, env_params, int(np.prod(obs_shape)), action_dim, low, high)


def flatten_obs(obs: jax.Array) -> jax.Array:
    """[N, *obs_shape] -> [N, obs_dim]."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


# =====================================================================================
# 4. Networks
# =====================================================================================

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """obs [..., obs_dim] -> (mean [..., A], log_std [..., A]) of the Gaussian before tanh."""

    action_dim: int
    hidden_size: int = 256

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        # [SAC-14] two hidden ReLU layers, flax's default (LeCun normal) initialisation
        x = nn.relu(nn.Dense(self.hidden_size)(obs))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        mean = nn.Dense(self.action_dim)(x)
        log_std = nn.Dense(self.action_dim)(x)
        return mean, squash_log_std(log_std)


class QNetwork(nn.Module):
    """(obs [..., obs_dim], action [..., A]) -> Q [...]; the action is in the env's units."""

    hidden_size: int = 256

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)  # [SAC-14] Q(s, a) on concat(s, a)
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        return nn.Dense(1)(x)[..., 0]


# =====================================================================================
# 5. State
# =====================================================================================

Params = Any  # a flax parameter pytree


class SACParams(NamedTuple):
    actor: Params
    critic: Params  # the twin critics, stacked: every leaf [2, ...]
    critic_target: Params  # their Polyak averages, [2, ...]
    log_alpha: jax.Array  # [] log of the entropy coefficient


class OptStates(NamedTuple):
    actor: optax.OptState
    critic: optax.OptState
    alpha: optax.OptState


class ReplayBuffer(NamedTuple):
    """A ring buffer of rows; a row holds one step of all N envs. R = buffer_rows."""

    obs: jax.Array  # [R, N, obs_dim]
    action: jax.Array  # [R, N, A] in the env's units
    reward: jax.Array  # [R, N]
    next_obs: jax.Array  # [R, N, obs_dim] the real next observation (before auto-reset)
    terminated: jax.Array  # [R, N] float 1.0 where the episode truly ended
    position: jax.Array  # [] int32, the row written next
    rows: jax.Array  # [] int32, rows filled so far (<= R)


class Transition(NamedTuple):
    """One step of the N envs, as stored in the buffer ([N, ...]); a uniform sample of the
    buffer has the same fields, [B, ...] (`Batch`)."""

    obs: jax.Array  # [N, obs_dim]
    action: jax.Array  # [N, A]
    reward: jax.Array  # [N]
    next_obs: jax.Array  # [N, obs_dim]
    terminated: jax.Array  # [N]


Batch = Transition  # [B, ...]: what buffer_sample returns and the losses read


class RunnerState(NamedTuple):
    """Everything the training carries from one iteration to the next (and checkpoints)."""

    params: SACParams
    opt_state: OptStates
    env_state: Any  # gymnax EnvState, batched over envs [N]
    obs: jax.Array  # [N, obs_dim] current observations
    buffer: ReplayBuffer
    episode_return: jax.Array  # [N] return of the running episode
    episode_length: jax.Array  # [N]
    key: jax.Array
    iteration: jax.Array  # [] int32, iterations done


class CriticInfo(NamedTuple):
    qf1_values: jax.Array  # [] mean Q1(s, a) over the batch
    qf2_values: jax.Array
    qf1_loss: jax.Array
    qf2_loss: jax.Array
    qf_loss: jax.Array  # (qf1_loss + qf2_loss) / 2, as CleanRL logs it


class ActorInfo(NamedTuple):
    actor_loss: jax.Array
    alpha: jax.Array  # the coefficient used in this update
    alpha_loss: jax.Array  # NaN with --no-autotune


class IterationMetrics(NamedTuple):
    """Per-iteration metrics; NaN where the iteration has none (no episode ended, no update)."""

    episodic_return: jax.Array  # mean return of the episodes that ended in this iteration
    episodic_length: jax.Array
    qf1_values: jax.Array
    qf2_values: jax.Array
    qf1_loss: jax.Array
    qf2_loss: jax.Array
    qf_loss: jax.Array
    actor_loss: jax.Array
    alpha: jax.Array
    alpha_loss: jax.Array


# TensorBoard tag of each metric (CleanRL's names)
METRIC_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "qf1_values": "losses/qf1_values",
    "qf2_values": "losses/qf2_values",
    "qf1_loss": "losses/qf1_loss",
    "qf2_loss": "losses/qf2_loss",
    "qf_loss": "losses/qf_loss",
    "actor_loss": "losses/actor_loss",
    "alpha": "losses/alpha",
    "alpha_loss": "losses/alpha_loss",
}
EPISODE_METRICS = ("episodic_return", "episodic_length")


# =====================================================================================
# 6. The algorithm's math: small pure functions
# =====================================================================================


def squash_log_std(raw: jax.Array) -> jax.Array:
    """[SAC-4] raw head output [..., A] -> log_std in [LOG_STD_MIN, LOG_STD_MAX] via tanh."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)


def action_scale_bias(low: jax.Array, high: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[SAC-5] the affine map [-1, 1] -> [low, high]: a = scale * u + bias; low, high [A]."""
    return (high - low) / 2.0, (high + low) / 2.0


def log_one_minus_tanh_sq(x: jax.Array) -> jax.Array:
    """log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x)), exact and stable for large |x|."""
    return 2.0 * (jnp.log(2.0) - x - jax.nn.softplus(-2.0 * x))


def squashed_gaussian_log_prob(
    x: jax.Array, mean: jax.Array, log_std: jax.Array, scale: jax.Array
) -> jax.Array:
    """[SAC-3] log density of a = scale * tanh(x) + bias where x ~ N(mean, exp(log_std)^2).

    x, mean, log_std: [..., A]; scale: [A]. Change of variables, per dimension:
    log p(a) = log N(x) - log |da/dx| = log N(x) - log scale - log(1 - tanh(x)^2).
    Returns [...], summed over the A independent dimensions.
    """
    z = (x - mean) * jnp.exp(-log_std)
    gaussian = -0.5 * z**2 - log_std - 0.5 * jnp.log(2.0 * jnp.pi)  # [..., A]
    return jnp.sum(gaussian - jnp.log(scale) - log_one_minus_tanh_sq(x), axis=-1)


def sample_action(
    key: jax.Array, mean: jax.Array, log_std: jax.Array, scale: jax.Array, bias: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample of the squashed Gaussian: (action [..., A], log_prob [...])."""
    x = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)  # [..., A]
    action = scale * jnp.tanh(x) + bias  # [SAC-5] rescaled to the env's bounds
    return action, squashed_gaussian_log_prob(x, mean, log_std, scale)


def deterministic_action(mean: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """[SAC-13] the evaluation action: tanh of the mean, rescaled to the bounds. [..., A]."""
    return scale * jnp.tanh(mean) + bias


# The done convention, used by td_target and by the rollout:
#   terminated: the episode truly ended (the MDP stops): no bootstrap, the soft value
#               after it is 0.
#   truncated:  the time limit cut the episode; the state it reached still has a value.
#               The buffer stores as next_obs the real observation reached,
#               info["final_observation"], not the first observation of the next episode
#               that gymnax's auto-reset returns, and the target bootstraps from it.
#   So only `terminated` enters the target; truncation needs no flag at all.
def td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q: jax.Array,
    next_log_prob: jax.Array,
    alpha: jax.Array,
    gamma: float,
) -> jax.Array:
    """[SAC-7] soft TD target r + gamma * (1 - terminated) * (Q'(s', a') - alpha * log pi(a'|s')).

    reward, terminated, next_log_prob: [B]; next_q: [B], the min of the twin target
    critics at (next_obs, a' ~ pi(.|next_obs)). Returns [B].
    """
    soft_value = next_q - alpha * next_log_prob
    return reward + gamma * (1.0 - terminated) * soft_value


def critic_loss_fn(q_values: jax.Array, target: jax.Array) -> tuple[jax.Array, CriticInfo]:
    """Mean squared TD errors of the twin critics. q_values: [2, B]; target: [B]."""
    per_critic = jnp.mean((q_values - target[None]) ** 2, axis=1)  # [2]
    loss = per_critic.sum()
    mean_q = q_values.mean(axis=1)
    return loss, CriticInfo(mean_q[0], mean_q[1], per_critic[0], per_critic[1], loss / 2.0)


def actor_loss_fn(log_prob: jax.Array, q_values: jax.Array, alpha: jax.Array) -> jax.Array:
    """E[alpha * log pi(a|s) - min_i Q_i(s, a)], a ~ pi(.|s). log_prob: [B]; q_values: [2, B]."""
    return jnp.mean(alpha * log_prob - jnp.min(q_values, axis=0))  # [SAC-6] min of the twins


def alpha_loss_fn(log_alpha: jax.Array, log_prob: jax.Array, target_entropy: float) -> jax.Array:
    """[SAC-10] -alpha * (log pi + target_entropy), log_prob [B] held fixed.

    Its gradient in log_alpha is -alpha * (E[log pi] + target_entropy): alpha grows while the
    policy's entropy -E[log pi] is below the target and shrinks while it is above.
    """
    return jnp.mean(-jnp.exp(log_alpha) * (jax.lax.stop_gradient(log_prob) + target_entropy))


def polyak_update(target: Params, online: Params, tau: float) -> Params:
    """[SAC-8] target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree.map(lambda t, o: tau * o + (1.0 - tau) * t, target, online)


def buffer_init(rows: int, num_envs: int, obs_dim: int, action_dim: int) -> ReplayBuffer:
    """[SAC-1] an empty replay buffer of rows x num_envs transitions."""
    return ReplayBuffer(
        obs=jnp.zeros((rows, num_envs, obs_dim)),
        action=jnp.zeros((rows, num_envs, action_dim)),
        reward=jnp.zeros((rows, num_envs)),
        next_obs=jnp.zeros((rows, num_envs, obs_dim)),
        terminated=jnp.zeros((rows, num_envs)),
        position=jnp.asarray(0, jnp.int32),
        rows=jnp.asarray(0, jnp.int32),
    )


def buffer_add(buffer: ReplayBuffer, transition: Transition) -> ReplayBuffer:
    """[SAC-1] write one step of the N envs at the ring position, overwriting the oldest row."""
    capacity = buffer.obs.shape[0]

    def write(store: jax.Array, value: jax.Array) -> jax.Array:  # store [R, N, ...], value [N, ...]
        return jax.lax.dynamic_update_index_in_dim(store, value.astype(store.dtype), buffer.position, 0)

    return buffer._replace(
        **{name: write(getattr(buffer, name), getattr(transition, name)) for name in Transition._fields},
        position=(buffer.position + 1) % capacity,
        rows=jnp.minimum(buffer.rows + 1, capacity),
    )


def buffer_sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Batch:
    """[SAC-1] batch_size transitions drawn uniformly (with replacement) from the filled rows."""
    row_key, env_key = jax.random.split(key)
    rows = jax.random.randint(row_key, (batch_size,), 0, buffer.rows)  # [B]
    envs = jax.random.randint(env_key, (batch_size,), 0, buffer.obs.shape[1])  # [B]
    return Batch(**{name: getattr(buffer, name)[rows, envs] for name in Batch._fields})


# =====================================================================================
# 7. make_train: the whole training as one pure function
# =====================================================================================


class SAC(NamedTuple):
    """The compiled pieces of one configuration; all pure functions of their inputs.

    `index` is the global iteration number. It comes from the scan's inputs, not from
    the (vmapped) state, so under jax.vmap over seeds the learning_starts and
    policy_frequency branches stay real branches instead of both being computed.
    """

    init: Callable[[jax.Array], RunnerState]  # key -> state before the first iteration
    iterate: Callable[[RunnerState, jax.Array], tuple[RunnerState, IterationMetrics]]
    run_chunk: Callable[[RunnerState, jax.Array], tuple[RunnerState, IterationMetrics]]
    train: Callable[[jax.Array], tuple[RunnerState, IterationMetrics]]  # key -> all iterations


def build_sac(args: Args, spec: EnvSpec) -> SAC:
    env, env_params = spec.env, spec.env_params
    num_envs, action_dim = args.num_envs, spec.action_dim
    actor = Actor(action_dim, args.hidden_size)
    critic = QNetwork(args.hidden_size)
    twin_q = jax.vmap(critic.apply, in_axes=(0, None, None))  # [SAC-6] params [2, ...] -> Q [2, B]
    # [SAC-11] Adam for each part: policy_lr for the actor, q_lr for the critics and alpha
    actor_optimizer = optax.adam(args.policy_lr)
    critic_optimizer = optax.adam(args.q_lr)
    alpha_optimizer = optax.adam(args.q_lr)
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    scale, bias = action_scale_bias(low, high)
    target_entropy = -float(action_dim)  # [SAC-10] target entropy -|A|
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))  # [SAC-12] vectorised envs

    def init(key: jax.Array) -> RunnerState:
        key, actor_key, critic_key, reset_key = jax.random.split(key, 4)
        dummy_obs, dummy_action = jnp.zeros((1, spec.obs_dim)), jnp.zeros((1, action_dim))
        critic_params = jax.vmap(critic.init, in_axes=(0, None, None))(
            jax.random.split(critic_key, 2), dummy_obs, dummy_action
        )
        log_alpha = jnp.asarray(0.0 if args.autotune else math.log(max(args.alpha, 1e-38)))
        params = SACParams(actor.init(actor_key, dummy_obs), critic_params, critic_params, log_alpha)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_envs), env_params
        )
        return RunnerState(
            params=params,
            opt_state=OptStates(
                actor_optimizer.init(params.actor),
                critic_optimizer.init(params.critic),
                alpha_optimizer.init(params.log_alpha),
            ),
            env_state=env_state,
            obs=flatten_obs(obs),  # [N, obs_dim]
            buffer=buffer_init(args.buffer_rows, num_envs, spec.obs_dim, action_dim),
            episode_return=jnp.zeros(num_envs),
            episode_length=jnp.zeros(num_envs, jnp.int32),
            key=key,
            iteration=jnp.asarray(0, jnp.int32),
        )

    def alpha_of(params: SACParams) -> jax.Array:
        return jnp.exp(params.log_alpha) if args.autotune else jnp.asarray(args.alpha)

    def critic_step(
        params: SACParams, opt_state: OptStates, batch: Batch, key: jax.Array
    ) -> tuple[SACParams, OptStates, CriticInfo]:
        """One gradient step of the twin critics toward the soft TD target."""
        next_mean, next_log_std = actor.apply(params.actor, batch.next_obs)
        next_action, next_log_prob = sample_action(key, next_mean, next_log_std, scale, bias)
        next_q = jnp.min(twin_q(params.critic_target, batch.next_obs, next_action), axis=0)  # [B]
        target = td_target(
            batch.reward, batch.terminated, next_q, next_log_prob, alpha_of(params), args.gamma
        )

        def loss(critic_params: Params) -> tuple[jax.Array, CriticInfo]:
            return critic_loss_fn(twin_q(critic_params, batch.obs, batch.action), target)

        grads, info = jax.grad(loss, has_aux=True)(params.critic)
        updates, critic_opt = critic_optimizer.update(grads, opt_state.critic, params.critic)
        params = params._replace(critic=optax.apply_updates(params.critic, updates))
        return params, opt_state._replace(critic=critic_opt), info

    def actor_step(
        params: SACParams, opt_state: OptStates, batch: Batch, key: jax.Array
    ) -> tuple[SACParams, OptStates, ActorInfo]:
        """One gradient step of the actor, then (autotune) one of log_alpha."""
        alpha = alpha_of(params)

        def loss(actor_params: Params) -> tuple[jax.Array, jax.Array]:
            mean, log_std = actor.apply(actor_params, batch.obs)
            action, log_prob = sample_action(key, mean, log_std, scale, bias)  # reparameterised
            return actor_loss_fn(log_prob, twin_q(params.critic, batch.obs, action), alpha), log_prob

        (actor_loss, log_prob), grads = jax.value_and_grad(loss, has_aux=True)(params.actor)
        updates, actor_opt = actor_optimizer.update(grads, opt_state.actor, params.actor)
        params = params._replace(actor=optax.apply_updates(params.actor, updates))
        opt_state = opt_state._replace(actor=actor_opt)
        alpha_loss = jnp.asarray(jnp.nan)
        if args.autotune:
            alpha_loss, grad = jax.value_and_grad(alpha_loss_fn)(params.log_alpha, log_prob, target_entropy)
            updates, alpha_opt = alpha_optimizer.update(grad, opt_state.alpha, params.log_alpha)
            params = params._replace(log_alpha=optax.apply_updates(params.log_alpha, updates))
            opt_state = opt_state._replace(alpha=alpha_opt)
        return params, opt_state, ActorInfo(actor_loss, alpha, alpha_loss)

    def learn(
        params: SACParams, opt_state: OptStates, buffer: ReplayBuffer, key: jax.Array, index: jax.Array
    ) -> tuple[SACParams, OptStates, CriticInfo, ActorInfo]:
        """One gradient step of the critics; the delayed actor and target updates when due."""
        sample_key, critic_key, actor_key = jax.random.split(key, 3)
        batch = buffer_sample(buffer, sample_key, args.batch_size)
        params, opt_state, critic_info = critic_step(params, opt_state, batch, critic_key)

        # [SAC-9] delayed policy updates: every policy_frequency iterations, policy_frequency
        # actor (and alpha) steps on the same batch, so actor and critic step equally often.
        def actor_steps(p: SACParams, o: OptStates) -> tuple[SACParams, OptStates, ActorInfo]:
            def one(carry: tuple[SACParams, OptStates], step_key: jax.Array) -> tuple[Any, ActorInfo]:
                p, o, info = actor_step(*carry, batch, step_key)
                return (p, o), info

            (p, o), infos = jax.lax.scan(one, (p, o), jax.random.split(actor_key, args.policy_frequency))
            return p, o, jax.tree.map(lambda x: x[-1], infos)

        def no_actor_step(p: SACParams, o: OptStates) -> tuple[SACParams, OptStates, ActorInfo]:
            return p, o, ActorInfo(*(jnp.asarray(jnp.nan) for _ in ActorInfo._fields))

        params, opt_state, actor_info = jax.lax.cond(
            index % args.policy_frequency == 0, actor_steps, no_actor_step, params, opt_state
        )
        # [SAC-8] Polyak-averaged target critics, every target_network_frequency iterations
        target = jax.lax.cond(
            index % args.target_network_frequency == 0,
            lambda p: polyak_update(p.critic_target, p.critic, args.tau),
            lambda p: p.critic_target,
            params,
        )
        return params._replace(critic_target=target), opt_state, critic_info, actor_info

    def iterate(state: RunnerState, index: jax.Array) -> tuple[RunnerState, IterationMetrics]:
        """One iteration: act in the N envs, store the step, one gradient step (once learning)."""
        key, noise_key, random_key, step_key, learn_key = jax.random.split(state.key, 5)
        mean, log_std = actor.apply(state.params.actor, state.obs)
        policy_action, _ = sample_action(noise_key, mean, log_std, scale, bias)  # [N, A]
        # [SAC-2] uniformly random actions until learning_starts steps have been taken
        random_action = jax.random.uniform(random_key, (num_envs, action_dim), minval=low, maxval=high)
        learning = index * num_envs >= args.learning_starts  # [] (not batched over seeds)
        action = jnp.where(learning, policy_action, random_action)
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(step_key, num_envs), state.env_state, action, env_params
        )
        # [SAC-7] store the real next observation, before the auto-reset (see td_target)
        buffer = buffer_add(
            state.buffer,
            Transition(
                state.obs, action, reward, flatten_obs(info["final_observation"]), terminated.astype(float)
            ),
        )
        done = jnp.logical_or(terminated, truncated)  # [N]
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        num_done = done.sum()

        def no_learning(
            p: SACParams, o: OptStates, b: ReplayBuffer, k: jax.Array, i: jax.Array
        ) -> tuple[SACParams, OptStates, CriticInfo, ActorInfo]:
            nan = jnp.asarray(jnp.nan)
            return p, o, CriticInfo(*(nan for _ in CriticInfo._fields)), ActorInfo(nan, nan, nan)

        params, opt_state, critic_info, actor_info = jax.lax.cond(
            learning, learn, no_learning, state.params, state.opt_state, buffer, learn_key, index
        )
        state = RunnerState(
            params=params,
            opt_state=opt_state,
            env_state=env_state,
            obs=flatten_obs(next_obs),
            buffer=buffer,
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
            key=key,
            iteration=state.iteration + 1,
        )
        metrics = IterationMetrics(
            episodic_return=jnp.where(num_done > 0, (episode_return * done).sum() / num_done, jnp.nan),
            episodic_length=jnp.where(num_done > 0, (episode_length * done).sum() / num_done, jnp.nan),
            **critic_info._asdict(),
            **actor_info._asdict(),
        )
        return state, metrics

    def run_chunk(state: RunnerState, first_iteration: jax.Array) -> tuple[RunnerState, IterationMetrics]:
        """iterations_per_chunk iterations; those past num_iterations (last chunk) are skipped.

        first_iteration is not batched over seeds, so under vmap the skip stays a real branch.
        """

        def maybe_iterate(s: RunnerState, index: jax.Array) -> tuple[RunnerState, IterationMetrics]:
            def skip(s: RunnerState, _: jax.Array) -> tuple[RunnerState, IterationMetrics]:
                return s, IterationMetrics(*(jnp.asarray(jnp.nan) for _ in IterationMetrics._fields))

            return jax.lax.cond(index < args.num_iterations, iterate, skip, s, index)

        indices = first_iteration + jnp.arange(args.iterations_per_chunk)
        return jax.lax.scan(maybe_iterate, state, indices)

    def train(key: jax.Array) -> tuple[RunnerState, IterationMetrics]:
        return jax.lax.scan(iterate, init(key), jnp.arange(args.num_iterations))

    return SAC(init, iterate, run_chunk, train)


def make_train(args: Args) -> Callable[[jax.Array], tuple[RunnerState, IterationMetrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds."""
    args = validate_args(args)
    return build_sac(args, make_env(args.env_id)).train


# =====================================================================================
# 8. Evaluation
# =====================================================================================


class EvalResult(NamedTuple):
    returns: jax.Array  # [E] return of each evaluation episode
    lengths: jax.Array  # [E]
    env_states: Any  # gymnax EnvState [T_max, E]: the trajectory, for rendering


def make_evaluate(args: Args, spec: EnvSpec) -> Callable[[Params, jax.Array], EvalResult]:
    """Deterministic policy (tanh of the mean action), eval_episodes episodes in parallel."""
    env, env_params = spec.env, spec.env_params
    actor = Actor(spec.action_dim, args.hidden_size)
    scale, bias = action_scale_bias(jnp.asarray(spec.action_low), jnp.asarray(spec.action_high))
    num_episodes = args.eval_episodes

    class EvalCarry(NamedTuple):
        env_state: Any  # [E]
        obs: jax.Array  # [E, obs_dim]
        returns: jax.Array  # [E]
        lengths: jax.Array  # [E]
        running: jax.Array  # [E] bool, the first episode is not over yet
        key: jax.Array

    def evaluate(actor_params: Params, key: jax.Array) -> EvalResult:
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
            mean, _ = actor.apply(actor_params, c.obs)
            action = deterministic_action(mean, scale, bias)  # [E, A]
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


def load_model(path: str | Path, args: Args) -> SACParams:
    """Read a --save-model file back: the actor, the twin critics, their targets, log_alpha."""
    args = validate_args(args)
    template = build_sac(args, make_env(args.env_id)).init(jax.random.PRNGKey(0))
    return flax.serialization.from_bytes(template.params, Path(path).read_bytes())


def evaluate_saved_model(run_dir: str | Path, episodes: int = 32, seed: int = 0) -> dict[str, Any]:
    """Load {run_dir}/{exp_name}.flax and evaluate it deterministically.

    >>> evaluate_saved_model("runs/Pendulum-v1__sac_jax__1__1700000000")["mean"]
    """
    run_dir = Path(run_dir)
    args = args_from_json(json.loads((run_dir / "args.json").read_text()))
    args.eval_episodes = episodes
    params = load_model(run_dir / f"{args.exp_name}.flax", args)
    result = jax.jit(make_evaluate(args, make_env(args.env_id)))(params.actor, jax.random.PRNGKey(seed))
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
        if not values:
            return
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


def chunk_log_points(
    metrics: dict[str, np.ndarray], first_iteration: int, args: Args
) -> list[tuple[int, dict[str, float]]]:
    """(global_step, {tag: value}) points of one seed's chunk, metrics[name]: [iterations].

    Episode statistics are logged at every iteration where an episode ended; the losses
    every log_frequency iterations, as their mean over those iterations (NaNs ignored).
    """
    points = []
    num_valid = len(metrics["qf_loss"])
    for u in range(num_valid):
        index = first_iteration + u
        values = {}
        if np.isfinite(metrics["episodic_return"][u]):
            values = {METRIC_TAGS[name]: float(metrics[name][u]) for name in EPISODE_METRICS}
        if (index + 1) % args.log_frequency == 0 or u == num_valid - 1:
            window = slice(max(0, u + 1 - args.log_frequency), u + 1)
            for name, tag in METRIC_TAGS.items():
                recent = metrics[name][window]
                recent = recent[np.isfinite(recent)]
                if name not in EPISODE_METRICS and len(recent):
                    values[tag] = float(recent.mean())
        if values:
            points.append(((index + 1) * args.num_envs, values))
    return points


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
DERIVED = {"num_iterations", "buffer_rows", "iterations_per_chunk"}


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


def seed_of(run_dir: Path) -> int:
    return int(run_dir.name.split("__")[2])


def initial_state(sac: SAC, args: Args, run_dirs: list[Path]) -> RunnerState:
    """Fresh state for every seed, or the seeds' checkpoints with --resume. Leaves: [S, ...]."""
    keys = jnp.stack([jax.random.PRNGKey(seed_of(d)) for d in run_dirs])  # [S, 2]
    state = jax.jit(jax.vmap(sac.init))(keys)
    if args.resume is None:
        return state
    template = seed_slice(state, 0)
    restored = [load_checkpoint(d, template) for d in run_dirs]
    state = jax.tree.map(lambda *xs: jnp.stack(xs), *restored)
    for run_dir in run_dirs:  # drop points logged after the checkpoint
        path = run_dir / "metrics.jsonl"
        if path.exists():
            last_step = int(state.iteration[0]) * args.num_envs
            lines = [x for x in path.read_text().splitlines() if json.loads(x)["global_step"] <= last_step]
            path.write_text("".join(line + "\n" for line in lines))
    return state


def check_finite(
    args: Args, metrics: IterationMetrics, state: RunnerState, first_iteration: int, num_valid: int
) -> None:
    """Stop on a non-finite critic loss or parameter; the last checkpoint (before this chunk) stays."""
    indices = first_iteration + np.arange(num_valid)
    learned = indices * args.num_envs >= args.learning_starts  # iterations with a gradient step
    losses = metrics.qf_loss[:, :num_valid][:, learned]  # [S, iterations that learned]
    params_finite = all(bool(np.isfinite(x).all()) for x in jax.tree.leaves(state.params))
    if np.isfinite(losses).all() and params_finite:
        return
    bad = np.flatnonzero(~np.isfinite(losses).all(axis=0))
    bad_iteration = int(indices[learned][bad[0]]) if len(bad) else int(indices[-1])
    print(
        f"error: non-finite loss or parameters at iteration {bad_iteration} (global step "
        f"{(bad_iteration + 1) * args.num_envs}); stopping. The last good checkpoint (after iteration "
        f"{first_iteration}) is kept.",
        file=sys.stderr,
    )
    sys.exit(1)


def print_progress(
    args: Args, metrics: IterationMetrics, step: int, num_valid: int, sps: float, elapsed: float
) -> None:
    recent = metrics.episodic_return[:, :num_valid]  # [S, U]
    recent = recent[np.isfinite(recent)]  # the episodes that ended in this chunk, all seeds
    latest = np.mean(recent[-max(1, len(recent) // 4) :]) if len(recent) else np.nan
    total = args.num_iterations * args.num_envs
    filled = int(20 * step / total)
    print(
        f"[{'#' * filled}{'-' * (20 - filled)}] {step:>10,}/{total:,} steps | {sps:,.0f} SPS | "
        f"return {latest:8.2f} | {elapsed:6.1f}s",
        flush=True,
    )


def finish_run(
    args: Args, spec: EnvSpec, state: RunnerState, run_dirs: list[Path], loggers: list[RunLogger]
) -> None:
    """Final deterministic evaluation of every seed in one program; eval.json, plot, model, video."""
    evaluate = jax.jit(jax.vmap(make_evaluate(args, spec)))
    eval_keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(seed_of(d)), 1) for d in run_dirs])
    result = evaluate(state.params.actor, eval_keys)
    for i, (run_dir, logger) in enumerate(zip(run_dirs, loggers, strict=True)):
        summary = eval_summary(EvalResult(result.returns[i], result.lengths[i], None))
        summary["global_step"] = args.num_iterations * args.num_envs
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        logger.log(summary["global_step"], {"eval/episodic_return": summary["mean"]})
        logger.close()
        plot_returns(run_dir, f"SAC on {args.env_id}, seed {seed_of(run_dir)}")
        if args.save_model:
            params = seed_slice(state.params, i)
            (run_dir / f"{args.exp_name}.flax").write_bytes(flax.serialization.to_bytes(params))
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
    sac = build_sac(args, spec)
    state = initial_state(sac, args, run_dirs)
    loggers = [RunLogger(d, args, seed_of(d)) for d in run_dirs]

    stop_signal: list[int] = []  # Ctrl-C / SIGTERM (from here on): finish the chunk, checkpoint, exit

    def request_stop(signum: int, _frame: Any) -> None:
        stop_signal.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing")

    previous_handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}

    # One chunk shape, compiled once. The state is not donated: on XLA CPU (jax 0.10.2)
    # donating it made the chunk 35-50% slower (measured), for a saving of one state's memory.
    run_chunk = jax.jit(jax.vmap(sac.run_chunk, in_axes=(0, None)))
    compile_start = time.perf_counter()
    compiled = run_chunk.lower(state, jnp.asarray(0, jnp.int32)).compile()
    compile_seconds = time.perf_counter() - compile_start
    print(
        f"compiled one chunk ({args.iterations_per_chunk} iterations x {args.num_envs} env step(s), "
        f"{len(run_dirs)} seed(s)) in {compile_seconds:.1f}s"
    )

    train_start = time.perf_counter()
    first_chunk = int(state.iteration[0]) // args.iterations_per_chunk
    steps_trained = 0
    for chunk in range(first_chunk, args.num_chunks):
        first_iteration = chunk * args.iterations_per_chunk
        chunk_start = time.perf_counter()
        state, metrics = compiled(state, jnp.asarray(first_iteration, jnp.int32))
        metrics = jax.tree.map(np.asarray, metrics)  # [S, iterations_per_chunk]
        chunk_seconds = time.perf_counter() - chunk_start
        num_valid = min(args.iterations_per_chunk, args.num_iterations - first_iteration)
        check_finite(args, metrics, state, first_iteration, num_valid)

        sps = num_valid * args.num_envs / chunk_seconds  # per seed
        for i, logger in enumerate(loggers):
            seed_metrics = {name: getattr(metrics, name)[i, :num_valid] for name in METRIC_TAGS}
            points = chunk_log_points(seed_metrics, first_iteration, args)
            for p, (step, values) in enumerate(points):
                if p == len(points) - 1:
                    values["charts/SPS"] = sps
                logger.log(step, values)
            logger.jsonl.flush()
            save_checkpoint(run_dirs[i], seed_slice(state, i))

        steps_trained += num_valid * args.num_envs
        elapsed = time.perf_counter() - train_start
        step = (first_iteration + num_valid) * args.num_envs
        print_progress(args, metrics, step, num_valid, steps_trained / elapsed, elapsed)
        if stop_signal and chunk < args.num_chunks - 1:
            for logger in loggers:
                logger.close()
            print(
                f"stopped after iteration {first_iteration + num_valid}; checkpoint saved. "
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
