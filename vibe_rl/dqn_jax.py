"""Deep Q-Network (DQN) and Double DQN, the whole training compiled with jax.lax.scan.

Algorithm: Mnih et al. 2015, "Human-level control through deep reinforcement learning"
(Nature 518); Double DQN: van Hasselt et al. 2016, "Deep Reinforcement Learning with
Double Q-learning" (AAAI); the small CNN for MinAtar: Young & Tian 2019, "MinAtar: An
Atari-Inspired Testbed for Thorough and Reproducible Reinforcement Learning Experiments"
(arXiv:1903.03176). Defaults are CleanRL's dqn_jax.py for CartPole-v1. The
implementation details are tagged in the code as `# [DQN-k]`; docs/dqn_jax.md lists them.

Everything runs inside one compiled program: the gymnax environments, epsilon-greedy
acting, the replay buffer (a fixed-size ring buffer of JAX arrays), the gradient steps
and the target-network updates. Discrete action spaces only.

Run:
    python vibe_rl/dqn_jax.py --env-id CartPole-v1

Writes runs/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json, TensorBoard
events, metrics.jsonl, checkpoints/ (the full state, replay buffer included), eval.json,
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
from typing import Any, Literal, NamedTuple

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
    """number of independent runs (buffers included) trained together in one vmapped program"""
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
    log_frequency: int = 1000
    """env steps per logged point (metrics are averaged over them; rounded to divide the run)"""
    eval_episodes: int = 32
    """episodes of the final deterministic evaluation (run in parallel)"""

    # Algorithm specific arguments (CleanRL dqn_jax.py defaults for CartPole-v1)
    env_id: str = "CartPole-v1"
    """the id of the gymnax environment (discrete actions)"""
    total_timesteps: int = 500_000
    """total environment steps of the training (per seed)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the Adam optimizer"""
    num_envs: int = 1
    """the number of parallel environments (one scan step = num_envs env steps)"""
    buffer_size: int = 10_000
    """the replay memory capacity, in transitions"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """target network update rate: 1.0 is a hard copy, below 1 a Polyak average"""
    target_network_frequency: int = 500
    """env steps between two target network updates"""
    batch_size: int = 128
    """the batch size of the samples from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon of the exploration"""
    end_e: float = 0.05
    """the ending epsilon of the exploration"""
    exploration_fraction: float = 0.5
    """the fraction of total_timesteps over which epsilon decays from start_e to end_e"""
    learning_starts: int = 10_000
    """env steps of pure collection before learning starts"""
    train_frequency: int = 10
    """env steps between two gradient steps"""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss: mean squared error (CleanRL) or Huber with delta 1 (Nature DQN)"""
    double_dqn: bool = False
    """Double DQN: the online network picks the next action, the target network values it"""
    network: Literal["auto", "mlp", "cnn"] = "auto"
    """Q-network: MLP (120-84) for vector observations, CNN for images; auto picks by shape"""

    # Filled in at runtime
    num_iterations: int = 0
    """(derived) scan steps of the training: total_timesteps // num_envs"""
    iterations_per_block: int = 0
    """(derived) scan steps per logged point: the largest divisor of num_iterations
    not above log_frequency // num_envs"""
    num_blocks: int = 0
    """(derived) logged points (the driver's unit of work): num_iterations // iterations_per_block"""
    blocks_per_chunk: int = 0
    """(derived) blocks in one compiled chunk: ceil(num_blocks / num_chunks)"""


class ArgsError(ValueError):
    """A bad command-line value, reported before anything compiles (exit status 2)."""


def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest d <= cap with n % d == 0 (at least 1)."""
    return max(d for d in range(1, max(1, min(n, cap)) + 1) if n % d == 0)


def validate_args(args: Args) -> Args:
    """Check every knob and compute the derived sizes, in this one place."""
    for name in (
        "num_seeds",
        "num_chunks",
        "log_frequency",
        "eval_episodes",
        "total_timesteps",
        "num_envs",
        "buffer_size",
        "target_network_frequency",
        "batch_size",
        "train_frequency",
    ):
        if getattr(args, name) <= 0:
            flag = "--" + name.replace("_", "-")
            raise ArgsError(f"{flag} must be a positive integer, got {getattr(args, name)}")
    if args.learning_starts < 0:
        raise ArgsError(f"--learning-starts must be >= 0, got {args.learning_starts}")
    if args.env_id not in gymnax.registered_envs:
        valid = ", ".join(gymnax.registered_envs)
        raise ArgsError(f"--env-id {args.env_id!r} is not a gymnax environment; valid: {valid}")
    env, env_params = gymnax.make(args.env_id)
    action_space = env.action_space(env_params)
    if not isinstance(action_space, spaces.Discrete):
        raise ArgsError(
            f"--env-id {args.env_id}: DQN needs a discrete action space, this one is "
            f"{type(action_space).__name__}; for continuous actions use vibe_rl/sac_jax.py"
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
    if not 0.0 <= args.gamma <= 1.0:
        raise ArgsError(f"--gamma must lie in [0, 1], got {args.gamma}")
    if not 0.0 < args.tau <= 1.0:
        raise ArgsError(f"--tau must lie in (0, 1], got {args.tau}")
    if args.learning_rate <= 0:
        raise ArgsError(f"--learning-rate must be positive, got {args.learning_rate}")
    for name in ("start_e", "end_e"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ArgsError(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(args, name)}")
    if not 0.0 < args.exploration_fraction <= 1.0:
        raise ArgsError(f"--exploration-fraction must lie in (0, 1], got {args.exploration_fraction}")
    if args.total_timesteps % args.num_envs != 0:
        raise ArgsError(
            f"--total-timesteps {args.total_timesteps} must be a multiple of --num-envs {args.num_envs}"
        )
    for name in ("train_frequency", "target_network_frequency"):
        if getattr(args, name) % args.num_envs != 0:
            raise ArgsError(
                f"--{name.replace('_', '-')} {getattr(args, name)} must be a multiple of --num-envs "
                f"{args.num_envs} (it counts env steps; one scan step is num_envs env steps)"
            )
    if args.buffer_size < args.num_envs:
        raise ArgsError(f"--buffer-size {args.buffer_size} is smaller than --num-envs {args.num_envs}")
    args.num_iterations = args.total_timesteps // args.num_envs
    args.iterations_per_block = largest_divisor_at_most(
        args.num_iterations, max(1, args.log_frequency // args.num_envs)
    )
    args.num_blocks = args.num_iterations // args.iterations_per_block
    args.num_chunks = min(args.num_chunks, args.num_blocks)
    args.blocks_per_chunk = math.ceil(args.num_blocks / args.num_chunks)
    return args


# =====================================================================================
# 3. Environment
# =====================================================================================

CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")


class EnvSpec(NamedTuple):
    """What the network, the buffer and the driver need to know about the environment."""

    env: Any  # gymnax.environments.environment.Environment
    env_params: Any  # its EnvParams
    obs_shape: tuple[int, ...]  # [obs] for vectors, [H, W, C] for images
    obs_dtype: Any  # the dtype the replay buffer stores observations in
    num_actions: int


def make_env(env_id: str) -> EnvSpec:
    env, env_params = gymnax.make(env_id)
    obs_shape = tuple(env.observation_space(env_params).shape)
    # [DQN-2] MinAtar observations are 0/1 channels (gymnax hands them out as float32):
    # stored as uint8 they take a quarter of the memory. Other envs keep their own dtype.
    obs_dtype = jnp.uint8 if env_id.endswith("MinAtar") else env.observation_space(env_params).dtype
    return EnvSpec(env, env_params, obs_shape, obs_dtype, int(env.action_space(env_params).n))


# =====================================================================================
# 4. Networks
# =====================================================================================


class QNetworkMLP(nn.Module):
    """obs [..., obs] -> Q-values [..., num_actions]. CleanRL's 120-84 ReLU MLP."""

    num_actions: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.num_actions)(x)


class QNetworkCNN(nn.Module):
    """obs [..., H, W, C] -> Q-values [..., num_actions]. [DQN-12] the MinAtar paper's net:
    one 3x3 conv with 16 channels (stride 1, valid padding), a 128-unit dense layer."""

    num_actions: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)  # uint8 0/1 from the buffer -> float
        x = nn.relu(nn.Conv(16, (3, 3), strides=1, padding="VALID")(x))  # [..., H-2, W-2, 16]
        x = x.reshape(*x.shape[:-3], -1)  # [..., (H-2)*(W-2)*16]
        x = nn.relu(nn.Dense(128)(x))
        return nn.Dense(self.num_actions)(x)


def make_q_network(args: Args, spec: EnvSpec) -> nn.Module:
    """[DQN-12] CNN for image observations [H, W, C], MLP otherwise; --network overrides.
    Flax default initialisation (LeCun normal kernels, zero biases), as CleanRL."""
    use_cnn = args.network == "cnn" or (args.network == "auto" and len(spec.obs_shape) == 3)
    return QNetworkCNN(spec.num_actions) if use_cnn else QNetworkMLP(spec.num_actions)


# =====================================================================================
# 5. State
# =====================================================================================

Params = Any  # a flax parameter pytree


class ReplayBuffer(NamedTuple):
    """[DQN-1] Fixed-size ring buffer of transitions, C = buffer_size slots.

    Memory: C * (2 * obs_bytes + 4 + 4 + 1) bytes, obs_bytes = prod(obs_shape) * itemsize
    of the stored dtype (obs and next_obs, int32 action, float32 reward, bool terminated).
    CartPole (4 float32): 41 bytes a transition; Breakout-MinAtar (10x10x4 uint8): 809.
    Slots [0, size) are filled; the next insert goes to `position` (wrapping around).
    """

    obs: jax.Array  # [C, *obs_shape] stored dtype
    action: jax.Array  # [C] int32
    reward: jax.Array  # [C] float32
    terminated: jax.Array  # [C] bool: no bootstrap from next_obs
    next_obs: jax.Array  # [C, *obs_shape] the real next observation (before any auto-reset)
    position: jax.Array  # [] int32, slot of the next insert
    size: jax.Array  # [] int32, number of filled slots (<= C)


class RunnerState(NamedTuple):
    """Everything the training carries from one scan step to the next (and checkpoints)."""

    params: Params  # online Q-network
    target_params: Params  # target Q-network
    opt_state: optax.OptState
    buffer: ReplayBuffer
    env_state: Any  # gymnax EnvState, batched over envs [N]
    obs: jax.Array  # [N, *obs_shape] current observations
    episode_return: jax.Array  # [N] return of the running episode
    episode_length: jax.Array  # [N] int32
    key: jax.Array
    iteration: jax.Array  # [] int32, scan steps done (global step = iteration * num_envs)


class Transition(NamedTuple):
    """N transitions of one scan step, as they go into the buffer; leading axis [N]."""

    obs: jax.Array  # [N, *obs_shape]
    action: jax.Array  # [N] int32
    reward: jax.Array  # [N]
    terminated: jax.Array  # [N] bool
    next_obs: jax.Array  # [N, *obs_shape] info["final_observation"]: obs before auto-reset


class StepInfo(NamedTuple):
    """Per-scan-step diagnostics, reduced to one BlockMetrics per logged block."""

    td_loss: jax.Array  # [] NaN when no gradient step was taken
    q_values: jax.Array  # [] mean Q(s, a) of the sampled batch, NaN without a gradient step
    return_sum: jax.Array  # [] sum of the returns of the episodes that ended in this step
    length_sum: jax.Array  # []
    num_done: jax.Array  # [] episodes that ended in this step


class BlockMetrics(NamedTuple):
    """Metrics of one block of iterations_per_block scan steps (one logged point)."""

    episodic_return: jax.Array  # mean return of the episodes finished in the block (NaN: none)
    episodic_length: jax.Array
    td_loss: jax.Array  # mean over the block's gradient steps (NaN: none)
    q_values: jax.Array
    epsilon: jax.Array  # exploration rate at the block's last step
    gradient_steps: jax.Array  # gradient steps taken in the block


# TensorBoard tag of each metric (CleanRL's names)
METRIC_TAGS = {
    "episodic_return": "charts/episodic_return",
    "episodic_length": "charts/episodic_length",
    "td_loss": "losses/td_loss",
    "q_values": "losses/q_values",
    "epsilon": "charts/epsilon",
    "gradient_steps": "charts/gradient_steps",
}


# =====================================================================================
# 6. The algorithm's math: small pure functions
# =====================================================================================


def buffer_init(capacity: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> ReplayBuffer:
    return ReplayBuffer(
        obs=jnp.zeros((capacity, *obs_shape), obs_dtype),
        action=jnp.zeros(capacity, jnp.int32),
        reward=jnp.zeros(capacity, jnp.float32),
        terminated=jnp.zeros(capacity, bool),
        next_obs=jnp.zeros((capacity, *obs_shape), obs_dtype),
        position=jnp.asarray(0, jnp.int32),
        size=jnp.asarray(0, jnp.int32),
    )


def buffer_add(buffer: ReplayBuffer, batch: Transition) -> ReplayBuffer:
    """[DQN-1] Write N transitions [N, ...] at position, position+1, ... (mod C)."""
    capacity, n = buffer.action.shape[0], batch.action.shape[0]
    slots = (buffer.position + jnp.arange(n)) % capacity  # [N]
    return ReplayBuffer(
        obs=buffer.obs.at[slots].set(batch.obs.astype(buffer.obs.dtype)),
        action=buffer.action.at[slots].set(batch.action.astype(jnp.int32)),
        reward=buffer.reward.at[slots].set(batch.reward.astype(jnp.float32)),
        terminated=buffer.terminated.at[slots].set(batch.terminated),
        next_obs=buffer.next_obs.at[slots].set(batch.next_obs.astype(buffer.next_obs.dtype)),
        position=(buffer.position + n) % capacity,
        size=jnp.minimum(buffer.size + n, capacity),
    )


def buffer_sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Transition:
    """[DQN-1] B transitions drawn uniformly (with replacement) from the filled slots [0, size)."""
    indices = jax.random.randint(key, (batch_size,), 0, buffer.size)  # [B]
    return Transition(
        obs=buffer.obs[indices],  # [B, *obs_shape]
        action=buffer.action[indices],
        reward=buffer.reward[indices],
        terminated=buffer.terminated[indices],
        next_obs=buffer.next_obs[indices],
    )


def linear_schedule(start_e: float, end_e: float, duration: float, step: jax.Array) -> jax.Array:
    """[DQN-3] epsilon: linear from start_e at env step 0 to end_e at `duration` env steps, then flat."""
    fraction = jnp.clip(step / duration, 0.0, 1.0)
    return start_e + fraction * (end_e - start_e)


# The done convention, used by the TD target and by the acting step:
#   terminated: the episode truly ended (the MDP stops): no bootstrap, the value after
#               it is 0.
#   truncated:  the time limit cut the episode; the state it reached still has a value.
#               The transition stores the real final observation (info["final_observation"],
#               before gymnax's auto-reset) as next_obs and bootstraps from it like from
#               any other step, so truncation is simply not stored: only `terminated` is.
def td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q_target: jax.Array,
    next_q_online: jax.Array,
    gamma: float,
    double_dqn: bool,
) -> jax.Array:
    """[DQN-7] r + gamma * (1 - terminated) * Q_target(s', a').

    reward, terminated: [B]; next_q_target, next_q_online: [B, num_actions] (Q of next_obs
    under the target and the online network). DQN: a' = argmax Q_target(s') (the max);
    [DQN-9] Double DQN: a' = argmax Q_online(s'), valued by Q_target. Returns [B].
    """
    if double_dqn:
        next_action = jnp.argmax(next_q_online, axis=-1)  # [B]
        next_value = jnp.take_along_axis(next_q_target, next_action[:, None], axis=-1)[:, 0]
    else:
        next_value = jnp.max(next_q_target, axis=-1)  # [B]
    return reward + gamma * (1.0 - terminated.astype(jnp.float32)) * next_value


def td_loss(q_pred: jax.Array, target: jax.Array, kind: str) -> jax.Array:
    """[DQN-8] q_pred, target: [B] -> mean MSE (CleanRL) or Huber with delta 1 (Nature DQN)."""
    if kind == "huber":
        return optax.huber_loss(q_pred, target, delta=1.0).mean()
    return ((q_pred - target) ** 2).mean()


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: jax.Array) -> jax.Array:
    """[DQN-4] q_values [N, num_actions] -> actions [N]: random with probability epsilon."""
    explore_key, action_key = jax.random.split(key)
    random_actions = jax.random.randint(action_key, q_values.shape[:1], 0, q_values.shape[-1])
    explore = jax.random.uniform(explore_key, q_values.shape[:1]) < epsilon
    return jnp.where(explore, random_actions, jnp.argmax(q_values, axis=-1)).astype(jnp.int32)


def update_target(params: Params, target_params: Params, tau: float) -> Params:
    """[DQN-10] target <- tau * online + (1 - tau) * target (tau = 1: a hard copy)."""
    return optax.incremental_update(params, target_params, tau)


# =====================================================================================
# 7. make_train: the whole training as one pure function
# =====================================================================================


class DQN(NamedTuple):
    """The compiled pieces of one configuration; all pure functions of their inputs."""

    init: Callable[[jax.Array], RunnerState]  # key -> state before the first step
    step: Callable[[RunnerState, jax.Array], tuple[RunnerState, StepInfo]]  # one scan step
    run_block: Callable[[RunnerState, jax.Array], tuple[RunnerState, BlockMetrics]]
    run_chunk: Callable[[RunnerState, jax.Array], tuple[RunnerState, BlockMetrics]]
    train: Callable[[jax.Array], tuple[RunnerState, BlockMetrics]]  # key -> all blocks


def build_dqn(args: Args, spec: EnvSpec) -> DQN:
    """Wire the pure functions into the scan steps of one configuration.

    Counting (all in env steps, CleanRL's global_step): scan step i (0-based) runs the N
    envs once, so after it global_step = (i + 1) * N. A gradient step follows scan step i
    when global_step > learning_starts and global_step % train_frequency == 0; the target
    network is updated when global_step > learning_starts and global_step %
    target_network_frequency == 0. Both frequencies are multiples of N (validate_args).
    The index i is a scan input, not part of the carried state, so under vmap over seeds
    the decisions stay unbatched and lax.cond skips the gradient step for real.
    """
    env, env_params = spec.env, spec.env_params
    network = make_q_network(args, spec)
    optimizer = optax.adam(args.learning_rate)  # [DQN-11] Adam, CleanRL's settings
    num_envs = args.num_envs
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))  # [DQN-5] vectorised envs
    exploration_steps = args.exploration_fraction * args.total_timesteps

    def init(key: jax.Array) -> RunnerState:
        key, net_key, reset_key = jax.random.split(key, 3)
        params = network.init(net_key, jnp.zeros((1, *spec.obs_shape), spec.obs_dtype))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_envs), env_params
        )
        return RunnerState(
            params=params,
            target_params=jax.tree.map(jnp.copy, params),  # own buffers: the state can be donated
            opt_state=optimizer.init(params),
            buffer=buffer_init(args.buffer_size, spec.obs_shape, spec.obs_dtype),
            env_state=env_state,
            obs=obs.astype(spec.obs_dtype),  # [N, *obs_shape]
            episode_return=jnp.zeros(num_envs),
            episode_length=jnp.zeros(num_envs, jnp.int32),
            key=key,
            iteration=jnp.asarray(0, jnp.int32),
        )

    def loss_fn(params: Params, target_params: Params, batch: Transition) -> tuple[jax.Array, jax.Array]:
        next_q_target = network.apply(target_params, batch.next_obs)  # [B, num_actions]
        next_q_online = network.apply(params, batch.next_obs) if args.double_dqn else next_q_target
        target = td_target(
            batch.reward, batch.terminated, next_q_target, next_q_online, args.gamma, args.double_dqn
        )
        target = jax.lax.stop_gradient(target)  # [B] [DQN-14] no gradient through the target
        q = network.apply(params, batch.obs)  # [B, num_actions]
        q_pred = jnp.take_along_axis(q, batch.action[:, None], axis=-1)[:, 0]  # [B]
        return td_loss(q_pred, target, args.loss), q_pred.mean()

    def gradient_step(state: RunnerState, sample_key: jax.Array) -> tuple[RunnerState, jax.Array, jax.Array]:
        batch = buffer_sample(state.buffer, sample_key, args.batch_size)  # [B, ...]
        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, batch
        )
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return state._replace(params=params, opt_state=opt_state), loss, q_mean

    def step(state: RunnerState, iteration: jax.Array) -> tuple[RunnerState, StepInfo]:
        """One scan step: act in the N envs, store, maybe learn, maybe update the target.

        iteration: [] int32, the 0-based index of this scan step (unbatched under vmap).
        """
        key, action_key, env_key, sample_key = jax.random.split(state.key, 4)
        global_step = (iteration + 1) * num_envs  # env steps done after this scan step
        epsilon = linear_schedule(args.start_e, args.end_e, exploration_steps, iteration * num_envs)
        q_values = network.apply(state.params, state.obs)  # [N, num_actions]
        action = epsilon_greedy(action_key, q_values, epsilon)  # [N]
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(env_key, num_envs), state.env_state, action, env_params
        )
        # [DQN-6] the real final observation, not the auto-reset one, is the next state
        transition = Transition(
            obs=state.obs,
            action=action,
            reward=reward,
            terminated=terminated,
            next_obs=info["final_observation"].astype(spec.obs_dtype),
        )
        buffer = buffer_add(state.buffer, transition)
        done = jnp.logical_or(terminated, truncated)  # [N]
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        state = state._replace(
            buffer=buffer,
            env_state=env_state,
            obs=next_obs.astype(spec.obs_dtype),
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
            key=key,
            iteration=state.iteration + 1,
        )

        # [DQN-13] learning_starts and train_frequency, counted in env steps (global_step)
        learning = global_step > args.learning_starts
        train_now = learning & (global_step % args.train_frequency == 0)

        def learn(s: RunnerState) -> tuple[RunnerState, jax.Array, jax.Array]:
            return gradient_step(s, sample_key)

        def no_learn(s: RunnerState) -> tuple[RunnerState, jax.Array, jax.Array]:
            return s, jnp.asarray(jnp.nan), jnp.asarray(jnp.nan)

        state, loss, q_mean = jax.lax.cond(train_now, learn, no_learn, state)
        # [DQN-10] target network, every target_network_frequency env steps
        target_now = learning & (global_step % args.target_network_frequency == 0)
        target_params = jax.lax.cond(
            target_now,
            lambda s: update_target(s.params, s.target_params, args.tau),
            lambda s: s.target_params,
            state,
        )
        state = state._replace(target_params=target_params)
        info_out = StepInfo(
            td_loss=loss,
            q_values=q_mean,
            return_sum=(episode_return * done).sum(),
            length_sum=(episode_length * done).sum().astype(jnp.float32),
            num_done=done.sum(),
        )
        return state, info_out

    def run_block(state: RunnerState, block: jax.Array) -> tuple[RunnerState, BlockMetrics]:
        """iterations_per_block scan steps, reduced to one logged point."""
        iterations = block * args.iterations_per_block + jnp.arange(args.iterations_per_block)
        state, info = jax.lax.scan(step, state, iterations)  # info: [iterations_per_block]
        num_done = info.num_done.sum()
        trained = jnp.isfinite(info.td_loss)
        num_trained = trained.sum()
        last_step = iterations[-1] * num_envs
        metrics = BlockMetrics(
            episodic_return=jnp.where(num_done > 0, info.return_sum.sum() / num_done, jnp.nan),
            episodic_length=jnp.where(num_done > 0, info.length_sum.sum() / num_done, jnp.nan),
            td_loss=jnp.where(
                num_trained > 0, jnp.where(trained, info.td_loss, 0).sum() / num_trained, jnp.nan
            ),
            q_values=jnp.where(
                num_trained > 0, jnp.where(trained, info.q_values, 0).sum() / num_trained, jnp.nan
            ),
            epsilon=linear_schedule(args.start_e, args.end_e, exploration_steps, last_step),
            gradient_steps=num_trained.astype(jnp.float32),
        )
        return state, metrics

    def run_chunk(state: RunnerState, first_block: jax.Array) -> tuple[RunnerState, BlockMetrics]:
        """blocks_per_chunk blocks; those past num_blocks (last chunk) are skipped.

        first_block is not batched over seeds, so under vmap the skip stays a real branch.
        """

        def maybe_block(s: RunnerState, block: jax.Array) -> tuple[RunnerState, BlockMetrics]:
            def skip(s: RunnerState) -> tuple[RunnerState, BlockMetrics]:
                return s, BlockMetrics(*(jnp.asarray(jnp.nan) for _ in BlockMetrics._fields))

            return jax.lax.cond(block < args.num_blocks, lambda s: run_block(s, block), skip, s)

        blocks = first_block + jnp.arange(args.blocks_per_chunk)
        return jax.lax.scan(maybe_block, state, blocks)

    def train(key: jax.Array) -> tuple[RunnerState, BlockMetrics]:
        return jax.lax.scan(run_block, init(key), jnp.arange(args.num_blocks))

    return DQN(init, step, run_block, run_chunk, train)


def make_train(args: Args) -> Callable[[jax.Array], tuple[RunnerState, BlockMetrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds."""
    args = validate_args(args)
    return build_dqn(args, make_env(args.env_id)).train


# =====================================================================================
# 8. Evaluation
# =====================================================================================


class EvalResult(NamedTuple):
    returns: jax.Array  # [E] return of each evaluation episode
    lengths: jax.Array  # [E]
    env_states: Any  # gymnax EnvState [T_max, E]: the trajectory, for rendering


def make_evaluate(args: Args, spec: EnvSpec) -> Callable[[Params, jax.Array], EvalResult]:
    """Deterministic greedy policy (argmax Q, epsilon 0), eval_episodes episodes in parallel."""
    env, env_params = spec.env, spec.env_params
    network = make_q_network(args, spec)
    num_episodes = args.eval_episodes

    class EvalCarry(NamedTuple):
        env_state: Any  # [E]
        obs: jax.Array  # [E, *obs_shape]
        returns: jax.Array  # [E]
        lengths: jax.Array  # [E]
        running: jax.Array  # [E] bool, the first episode is not over yet
        key: jax.Array

    def evaluate(params: Params, key: jax.Array) -> EvalResult:
        reset_key, key = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_key, num_episodes), env_params
        )
        zeros = jnp.zeros(num_episodes)
        carry = EvalCarry(
            env_state,
            obs.astype(spec.obs_dtype),
            zeros,
            zeros.astype(jnp.int32),
            jnp.ones(num_episodes, bool),
            key,
        )

        def step(c: EvalCarry, _: None) -> tuple[EvalCarry, Any]:
            key, step_key = jax.random.split(c.key)
            action = jnp.argmax(network.apply(params, c.obs), axis=-1)  # [E]
            obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, num_episodes), c.env_state, action, env_params
            )
            returns = c.returns + reward * c.running
            lengths = c.lengths + c.running
            running = c.running & ~(terminated | truncated)
            carry = EvalCarry(env_state, obs.astype(spec.obs_dtype), returns, lengths, running, key)
            return carry, c.env_state

        carry, env_states = jax.lax.scan(step, carry, None, env_params.max_steps_in_episode)
        return EvalResult(carry.returns, carry.lengths, env_states)

    return evaluate


def load_model(path: str | Path, args: Args) -> Params:
    """Read a --save-model file back: the online Q-network's parameters."""
    args = validate_args(args)
    spec = make_env(args.env_id)
    template = build_dqn(args, spec).init(jax.random.PRNGKey(0))
    return flax.serialization.from_bytes(template.params, Path(path).read_bytes())


def evaluate_saved_model(run_dir: str | Path, episodes: int = 32, seed: int = 0) -> dict[str, Any]:
    """Load {run_dir}/{exp_name}.flax and evaluate it deterministically.

    >>> evaluate_saved_model("runs/CartPole-v1__dqn_jax__1__1700000000")["mean"]
    """
    run_dir = Path(run_dir)
    args = args_from_json(json.loads((run_dir / "args.json").read_text()))
    args.eval_episodes = episodes
    params = load_model(run_dir / f"{args.exp_name}.flax", args)
    result = jax.jit(make_evaluate(args, make_env(args.env_id)))(params, jax.random.PRNGKey(seed))
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
    ax.set_ylabel("episodic return (training, epsilon-greedy)")
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
DERIVED = {"num_iterations", "iterations_per_block", "num_blocks", "blocks_per_chunk"}


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


def train_chunks(
    args: Args,
    compiled: Callable[[RunnerState, jax.Array], tuple[RunnerState, BlockMetrics]],
    state: RunnerState,
    run_dirs: list[Path],
    loggers: list[RunLogger],
    stop_signal: list[int],
    done_blocks: int,
) -> RunnerState:
    """Run the remaining chunks: log, check for non-finite values, checkpoint, stop on a signal."""
    steps_per_block = args.iterations_per_block * args.num_envs
    total_steps = args.num_blocks * steps_per_block
    first_chunk = done_blocks // args.blocks_per_chunk
    train_start = time.perf_counter()
    steps_done_at_start = done_blocks * steps_per_block
    for chunk in range(first_chunk, args.num_chunks):
        first_block = chunk * args.blocks_per_chunk
        chunk_start = time.perf_counter()
        state, metrics = compiled(state, jnp.asarray(first_block, jnp.int32))
        metrics = jax.tree.map(np.asarray, metrics)  # [S, blocks_per_chunk]
        chunk_seconds = time.perf_counter() - chunk_start
        num_valid = min(args.blocks_per_chunk, args.num_blocks - first_block)

        # a block without gradient steps has a NaN td_loss by design: only trained blocks count
        losses = metrics.td_loss[:, :num_valid]  # [S, num_valid]
        trained = metrics.gradient_steps[:, :num_valid] > 0
        bad_loss = trained & ~np.isfinite(losses)
        params_finite = all(bool(np.isfinite(x).all()) for x in jax.tree.leaves(state.params))
        if bad_loss.any() or not params_finite:
            bad = np.argwhere(bad_loss.any(axis=0))
            bad_block = first_block + (int(bad[0, 0]) if len(bad) else num_valid - 1)
            print(
                f"error: non-finite loss or parameters in block {bad_block} (global steps up to "
                f"{(bad_block + 1) * steps_per_block}); the last good checkpoint "
                f"(global step {first_block * steps_per_block}) is kept in {run_dirs[0].parent}",
                file=sys.stderr,
            )
            sys.exit(1)

        sps = num_valid * steps_per_block / chunk_seconds
        for i, logger in enumerate(loggers):
            for u in range(num_valid):
                values = {tag: float(getattr(metrics, name)[i, u]) for name, tag in METRIC_TAGS.items()}
                if u == num_valid - 1:
                    values["charts/SPS"] = sps
                logger.log((first_block + u + 1) * steps_per_block, values)
            logger.jsonl.flush()
            save_checkpoint(run_dirs[i], seed_slice(state, i))

        step = (first_block + num_valid) * steps_per_block
        recent = metrics.episodic_return[:, :num_valid]
        latest = (
            np.nanmean(recent[:, -max(1, num_valid // 4) :]) if np.isfinite(recent).any() else float("nan")
        )
        frac = step / total_steps
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        elapsed = time.perf_counter() - train_start
        overall_sps = (step - steps_done_at_start) * len(run_dirs) / max(elapsed, 1e-9)
        epsilon = float(metrics.epsilon[0, num_valid - 1])
        print(
            f"[{bar}] {step:>10,}/{total_steps:,} steps | {overall_sps:,.0f} SPS | "
            f"return {latest:8.2f} | epsilon {epsilon:.3f} | {elapsed:6.1f}s",
            flush=True,
        )
        if stop_signal and chunk < args.num_chunks - 1:
            for logger in loggers:
                logger.close()
            print(
                f"stopped at global step {step}; checkpoint saved. "
                f"Continue with: python {sys.argv[0]} --resume {run_dirs[0]}"
            )
            sys.exit(128 + stop_signal[0])
    return state


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
    dqn = build_dqn(args, spec)
    seeds = [int(d.name.split("__")[2]) for d in run_dirs]
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])  # [S, 2]
    state = jax.jit(jax.vmap(dqn.init))(keys)  # every leaf [S, ...]
    if args.resume is not None:
        template = seed_slice(state, 0)
        restored = [load_checkpoint(d, template) for d in run_dirs]
        state = jax.tree.map(lambda *xs: jnp.stack(xs), *restored)
    steps_per_block = args.iterations_per_block * args.num_envs
    total_steps = args.num_blocks * steps_per_block
    done_blocks = int(state.iteration[0]) // args.iterations_per_block

    if args.resume is not None:  # drop points logged after the checkpoint
        for run_dir in run_dirs:
            path = run_dir / "metrics.jsonl"
            if path.exists():
                keep = [
                    line
                    for line in path.read_text().splitlines()
                    if json.loads(line)["global_step"] <= done_blocks * steps_per_block
                ]
                path.write_text("".join(line + "\n" for line in keep))
    loggers = [RunLogger(d, args, s) for d, s in zip(run_dirs, seeds, strict=True)]

    # One chunk shape, compiled once. The state is not donated: on XLA CPU (jax 0.10.2)
    # donating it made the chunk 35-50% slower (measured), for a saving of one state's memory.
    run_chunk = jax.jit(jax.vmap(dqn.run_chunk, in_axes=(0, None)))
    compile_start = time.perf_counter()
    compiled = run_chunk.lower(state, jnp.asarray(0, jnp.int32)).compile()

    stop_signal: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        stop_signal.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing")

    # installed before the "compiled" line, so a signal sent on seeing it is always caught
    previous_handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"compiled one chunk ({args.blocks_per_chunk} blocks x {steps_per_block} steps, "
        f"{len(seeds)} seed(s)) in {time.perf_counter() - compile_start:.1f}s",
        flush=True,
    )
    try:
        state = train_chunks(args, compiled, state, run_dirs, loggers, stop_signal, done_blocks)
    finally:  # also on sys.exit: the caller's handlers come back
        for s, handler in previous_handlers.items():
            signal.signal(s, handler)

    # Final deterministic evaluation, every seed in one program.
    evaluate = jax.jit(jax.vmap(make_evaluate(args, spec)))
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    result = evaluate(state.params, eval_keys)
    for i, (run_dir, logger) in enumerate(zip(run_dirs, loggers, strict=True)):
        summary = eval_summary(EvalResult(result.returns[i], result.lengths[i], None))
        summary["global_step"] = total_steps
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        logger.log(summary["global_step"], {"eval/episodic_return": summary["mean"]})
        logger.close()
        plot_returns(run_dir, f"{args.env_id} DQN seed {seeds[i]}")
        if args.save_model:
            (run_dir / f"{args.exp_name}.flax").write_bytes(
                flax.serialization.to_bytes(seed_slice(state.params, i))
            )
        if args.capture_video:
            first_episode = jax.tree.map(lambda x: x[:, 0], seed_slice(result.env_states, i))  # [T_max]
            frames = render_frames(spec, args.env_id, first_episode, int(result.lengths[i][0]))
            write_gif(run_dir / "videos" / "eval.gif", frames)
        print(
            f"{run_dir}: eval return {summary['mean']:.2f} +- {summary['std']:.2f} "
            f"over {summary['episodes']} episodes"
        )


if __name__ == "__main__":
    main()
