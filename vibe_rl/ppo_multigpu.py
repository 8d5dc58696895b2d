"""PPO sharded over every device JAX sees (GSPMD), on one machine or several.

Algorithm: Schulman et al. 2017, "Proximal Policy Optimization Algorithms"
(arXiv:1707.06347), with the 13 core implementation details of Huang et al. 2022,
"The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog track).
The details are tagged in the code as `# [PPO-k]`; docs/ppo_jax_scan.md lists them.

The algorithm is the one of ppo_jax_scan.py, written as ordinary single-program code
over the global batch of N environments. A 1-D `jax.sharding.Mesh` over jax.devices()
(every process's devices) has one axis, "data". The environment batch (env states,
observations, rollout buffer, advantages) is sharded along it with NamedSharding: each
of the D devices holds L = N / D environments. Parameters and optimizer state are
replicated (or, with --fsdp, sharded too). XLA's GSPMD partitioner turns the program
into one per device and inserts the collectives: per minibatch step one all-reduce of
the gradient. No pmap, no hand-written psum. docs/ppo_multigpu.md has the details.

Minibatches stay local: envs are taken in fixed groups of G consecutive envs (G does
not depend on D, and every device holds whole groups); each group's T*G samples are
shuffled and dealt into the M minibatches. No sample crosses a device during an epoch.
Random keys are derived per global env index (and per global group index), so the same
seed and the same global --num-envs give the same training on any number of devices.

Multi-host: --distributed calls jax.distributed.initialize. Only process 0 logs and
writes the run directory; checkpoints are written by all processes with Orbax.

Discrete actions (Categorical policy) and continuous actions (diagonal Gaussian with a
state-independent log-std, actions clipped to the bounds) are chosen from the gymnax
environment's action space. The environment (gymnax) runs inside the compiled program.

Run:
    python vibe_rl/ppo_multigpu.py --env-id CartPole-v1 --num-envs 8
    # several machines (e.g. under SLURM: srun, one process per node):
    python vibe_rl/ppo_multigpu.py --distributed --num-envs 4096

Writes runs/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json, TensorBoard
events, metrics.jsonl, checkpoints/ (Orbax), eval.json, episodic_return.png and, on request,
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
from typing import Any, NamedTuple

import flax.linen as nn
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import tyro
from flax.linen.initializers import constant, orthogonal
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

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
    """width of the two hidden layers of the actor and of the critic"""
    normalize_obs: bool = False
    """normalise observations by running mean and std (clipped to +-10)"""
    normalize_reward: bool = False
    """scale rewards by the running std of the discounted return (clipped to +-10)"""

    # Sharding and multi-host
    shuffle_group_envs: int = 0
    """envs whose samples are shuffled together into the minibatches (must divide the envs
    per device); 0: the smallest G for which num_minibatches divides num_steps * G"""
    fsdp: bool = False
    """shard parameters and optimizer state along the device axis too (else replicated)"""
    distributed: bool = False
    """several processes (machines): call jax.distributed.initialize before anything else"""
    coordinator_address: str | None = None
    """with --distributed: host:port of process 0 (omit all three to auto-detect, e.g. SLURM)"""
    num_processes: int | None = None
    """with --distributed: the number of processes"""
    process_id: int | None = None
    """with --distributed: the index of this process, 0 .. num_processes-1"""

    # Filled in at runtime
    batch_size: int = 0
    """(derived) num_envs * num_steps"""
    minibatch_size: int = 0
    """(derived) batch_size // num_minibatches"""
    num_iterations: int = 0
    """(derived) number of PPO updates: total_timesteps // batch_size"""
    updates_per_chunk: int = 0
    """(derived) updates in one compiled chunk: ceil(num_iterations / num_chunks)"""
    num_devices: int = 0
    """(derived) D, the devices of the mesh (all processes)"""
    envs_per_device: int = 0
    """(derived) L = num_envs // num_devices"""


class ArgsError(ValueError):
    """A bad command-line value, reported before anything compiles (exit status 2)."""


def validate_args(args: Args, num_devices: int | None = None) -> Args:
    """Check every knob and compute the derived sizes, in this one place.

    num_devices: D, the size of the mesh; None asks JAX (jax.device_count(), every
    process's devices), which starts the backend: call validate_distributed first.
    """
    validate_distributed(args)
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
    import gymnax  # not at the top: see make_env
    from gymnax.environments import spaces

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

    D = jax.device_count() if num_devices is None else num_devices
    if args.num_envs % D != 0:
        raise ArgsError(f"--num-envs {args.num_envs} must be divisible by the device count, {D}")
    args.num_devices, args.envs_per_device = D, args.num_envs // D
    T, M, L = args.num_steps, args.num_minibatches, args.envs_per_device
    if args.shuffle_group_envs < 0:
        raise ArgsError(f"--shuffle-group-envs must be >= 0, got {args.shuffle_group_envs}")
    if args.shuffle_group_envs == 0:  # the smallest G with M | T*G; it does not depend on D
        args.shuffle_group_envs = M // math.gcd(M, T)
    G = args.shuffle_group_envs
    if (T * G) % M != 0 or L % G != 0:
        raise ArgsError(
            f"minibatches must divide per device: every device holds L = num_envs / devices = "
            f"{args.num_envs} / {D} = {L} envs in groups of --shuffle-group-envs G = {G}; G must "
            f"divide L and --num-minibatches {M} must divide num_steps * G = {T} * {G}"
        )
    return args


def validate_distributed(args: Args) -> None:
    """--distributed needs all three of coordinator, process count and id, or none of them
    in an environment where JAX finds them itself (SLURM, Open MPI, ...)."""
    given = {
        "--coordinator-address": args.coordinator_address,
        "--num-processes": args.num_processes,
        "--process-id": args.process_id,
    }
    named = [flag for flag, value in given.items() if value is not None]
    if named and not args.distributed:
        raise ArgsError(f"{', '.join(named)} only make sense with --distributed")
    if not args.distributed:
        return
    if not named:
        detected = any(v in os.environ for v in ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "PMI_RANK"))
        if not detected:
            raise ArgsError(
                "--distributed needs --coordinator-address, --num-processes and --process-id "
                "(or a SLURM / Open MPI job, where JAX detects them)"
            )
        return
    if len(named) < 3:
        missing = ", ".join(flag for flag, value in given.items() if value is None)
        raise ArgsError(f"--distributed with {', '.join(named)} also needs {missing}")
    if args.num_processes <= 0 or not 0 <= args.process_id < args.num_processes:
        raise ArgsError(
            f"--process-id {args.process_id} must lie in [0, --num-processes {args.num_processes})"
        )
    if ":" not in args.coordinator_address:
        raise ArgsError(f"--coordinator-address {args.coordinator_address!r} must be host:port")


# =====================================================================================
# 3. Environment
# =====================================================================================

CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")


class EnvSpec(NamedTuple):
    """What the networks and the driver need to know about the environment."""

    env: Any  # gymnax.environments.environment.Environment
    env_params: Any  # its EnvParams
    obs_dim: int  # observations are flattened: [*obs_shape] -> [obs_dim]
    action_dim: int  # number of discrete actions, or A for Box actions
    discrete: bool
    action_low: np.ndarray  # [A] (unused for discrete actions)
    action_high: np.ndarray  # [A]


def make_env(env_id: str) -> EnvSpec:
    # gymnax is imported here, not at the top of the file: importing it starts JAX's
    # backend, and with --distributed jax.distributed.initialize must come before that.
    import gymnax
    from gymnax.environments import spaces

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
    return EnvSpec(env, env_params, int(np.prod(obs_shape)), int(action_dim), discrete, low, high)


def flatten_obs(obs: jax.Array) -> jax.Array:
    """[N, *obs_shape] -> [N, obs_dim] (MinAtar images become vectors)."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


# =====================================================================================
# 4. Networks
# =====================================================================================


class Categorical(NamedTuple):
    """Policy over discrete actions."""

    logits: jax.Array  # [..., K]

    def sample(self, keys: jax.Array) -> jax.Array:
        """keys [N, 2]: one key per row (env), so a row's draw does not depend on the others."""
        return jax.vmap(jax.random.categorical)(keys, self.logits)

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

    def sample(self, keys: jax.Array) -> jax.Array:
        """keys [N, 2]: one key per row (env)."""
        noise = jax.vmap(lambda key: jax.random.normal(key, self.mean.shape[1:]))(keys)  # [N, A]
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


class Actor(nn.Module):
    """obs [..., obs_dim] -> policy distribution. [PPO-13] separate from the critic."""

    action_dim: int
    discrete: bool
    hidden_size: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> Categorical | DiagGaussian:
        x = hidden_layers(obs, self.hidden_size)
        # [PPO-2] policy head gain 0.01: the initial policy is near uniform / near mean 0
        out = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(x)
        if self.discrete:
            return Categorical(out)
        log_std = self.param("log_std", constant(0.0), (self.action_dim,))  # state-independent
        return DiagGaussian(out, log_std)


class Critic(nn.Module):
    """obs [..., obs_dim] -> state value [...]."""

    hidden_size: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = hidden_layers(obs, self.hidden_size)
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
    """Everything the training carries from one update to the next (and checkpoints).

    Fields with an env axis [N] are sharded along the mesh's "data" axis (ENV_FIELDS);
    the rest are replicated (parameters and optimizer state: sharded with --fsdp).
    """

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
    log_prob: jax.Array  # [N] log pi_old(action | obs)
    reward: jax.Array  # [N] (scaled when --normalize-reward)
    terminated: jax.Array  # [N] bool: true end of the episode, no bootstrap
    truncated: jax.Array  # [N] bool: time limit reached, bootstrap from final_obs
    final_obs: jax.Array  # [N, obs_dim] raw observation reached, before auto-reset
    episode_return: jax.Array  # [N] return of the episode that ended here (where done)
    episode_length: jax.Array  # [N]


# RunnerState fields whose leading axis is the env axis [N]: sharded along "data".
ENV_FIELDS = ("env_state", "obs", "episode_return", "episode_length", "discounted_return")


class Batch(NamedTuple):
    """The rollout as the SGD phase sees it. Leading axes [T, N] for the whole rollout;
    [N/G, T*G/M] for one minibatch (groups of G envs, each giving T*G/M samples), the
    group axis sharded along "data"; the loss functions average over all leading axes."""

    obs: jax.Array  # [..., obs_dim] normalised
    action: jax.Array  # [...] or [..., A]
    log_prob: jax.Array  # [...]
    value: jax.Array  # [...] old value estimates
    advantage: jax.Array  # [...] (normalised per minibatch with --norm-adv)
    target: jax.Array  # [...] returns = advantage + value


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
    """Merge a batch x [*K, *shape] into the running statistics (Chan et al. parallel update).

    All leading axes K (e.g. [T, N]) are batch axes; they are not flattened, because
    merging the sharded env axis with another would move data between devices.
    """
    axes = tuple(range(x.ndim - rms.mean.ndim))
    batch_mean, batch_var, batch_count = x.mean(axes), x.var(axes), math.prod(x.shape[: len(axes)])
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
    next_values = jnp.where(truncated, final_values, next_values)
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


def shuffle_into_minibatches(batch: Batch, key: jax.Array, num_minibatches: int, group_envs: int) -> Batch:
    """[PPO-6] deal the rollout [T, N, ...] into M shuffled minibatches [M, N/G, T*G/M, ...].

    The N envs form N/G groups of G consecutive envs. Each group's T*G samples are
    permuted (key: fold_in(key, global group index)) and cut into M equal parts; minibatch
    m is part m of every group. When a device holds whole groups (G divides N/D), the
    group axis is the sharded axis, so every sample stays on its device, and nothing here
    depends on D: 1 device and 4 devices see the same minibatches.
    """
    T, N = batch.advantage.shape
    num_groups = N // group_envs
    group_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(num_groups))
    permutations = jax.vmap(lambda k: jax.random.permutation(k, T * group_envs))(group_keys)  # [N/G, T*G]

    def layout(x: jax.Array) -> jax.Array:  # [T, N, ...]
        x = jnp.swapaxes(x, 0, 1)  # [N, T, ...]
        x = x.reshape(num_groups, group_envs * T, *x.shape[2:])  # [N/G, G*T, ...]
        x = jax.vmap(lambda xs, perm: xs[perm])(x, permutations)  # [N/G, G*T, ...] shuffled in groups
        x = x.reshape(num_groups, num_minibatches, -1, *x.shape[2:])  # [N/G, M, G*T/M, ...]
        return jnp.swapaxes(x, 0, 1)  # [M, N/G, G*T/M, ...]

    return jax.tree.map(layout, batch)


def normalize_advantages(advantages: jax.Array) -> jax.Array:
    """[PPO-7] advantages [M, ...] -> zero mean, unit std within each minibatch m.

    Done for all M minibatches before the SGD loop: it reads only data, so the minibatch
    step itself needs no collective besides the gradient's all-reduce.
    """
    axes = tuple(range(1, advantages.ndim))
    mean = advantages.mean(axes, keepdims=True)
    std = advantages.std(axes, keepdims=True)
    return (advantages - mean) / (std + 1e-8)


def policy_loss_fn(
    new_log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_coef: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """[PPO-8] clipped surrogate objective, negated; all inputs of one shape [...].

    Returns (loss, old_approx_kl, approx_kl, clipfrac); the last three are diagnostics.
    """
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
    """1 - Var(target - predicted) / Var(target); NaN when the target is constant."""
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


def make_mesh(devices: list[Any] | None = None) -> Mesh:
    """A 1-D mesh over all devices of all processes, axis "data", classic GSPMD (Auto)."""
    devices = jax.devices() if devices is None else devices
    return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def fsdp_spec(shape: tuple[int, ...], num_devices: int) -> P:
    """--fsdp: shard a parameter (or Adam moment) along its largest axis that D divides;
    replicate it when none does (small biases, scalars)."""
    candidates = [axis for axis, size in enumerate(shape) if size % num_devices == 0 and size >= num_devices]
    if not candidates:
        return P()
    axis = max(candidates, key=lambda a: shape[a])
    return P(*([None] * axis), "data")


def state_shardings(state: RunnerState, mesh: Mesh, fsdp: bool, seed_axis: bool) -> RunnerState:
    """The NamedSharding of every leaf of a RunnerState (arrays or ShapeDtypeStructs).

    Env fields: the env axis along "data". Parameters and optimizer state: replicated, or
    with fsdp along their largest divisible axis. Everything else: replicated.
    seed_axis: the leaves have a leading seed axis [S] (never sharded).
    """
    lead = (None,) if seed_axis else ()
    D = mesh.devices.size

    def env_sharded(x: Any) -> NamedSharding:
        return NamedSharding(mesh, P(*lead, "data"))

    def param_sharded(x: Any) -> NamedSharding:
        if not fsdp or x.ndim == len(lead):
            return NamedSharding(mesh, P())
        return NamedSharding(mesh, P(*lead, *fsdp_spec(tuple(x.shape[len(lead) :]), D)))

    def replicated(x: Any) -> NamedSharding:
        return NamedSharding(mesh, P())

    shardings = {}
    for name in RunnerState._fields:
        rule = (
            env_sharded
            if name in ENV_FIELDS
            else param_sharded
            if name in ("params", "opt_state")
            else replicated
        )
        shardings[name] = jax.tree.map(rule, getattr(state, name))
    return RunnerState(**shardings)


class PPO(NamedTuple):
    """The compiled pieces of one configuration; all pure functions of their inputs."""

    init: Callable[[jax.Array], RunnerState]  # key -> state before the first update
    update: Callable[[RunnerState], tuple[RunnerState, UpdateMetrics]]  # one PPO iteration
    run_chunk: Callable[[RunnerState, jax.Array], tuple[RunnerState, UpdateMetrics]]
    train: Callable[[jax.Array], tuple[RunnerState, UpdateMetrics]]  # key -> all updates


def build_ppo(args: Args, spec: EnvSpec, mesh: Mesh) -> PPO:
    """The PPO functions of one configuration, written over the global batch of N envs.

    The only sharding written here: env-axis arrays created inside the program and the
    minibatches are constrained to be sharded along "data"; GSPMD propagates the rest
    from the shardings of the inputs (state_shardings) given to jax.jit.
    """
    env, env_params = spec.env, spec.env_params
    actor = Actor(spec.action_dim, spec.discrete, args.hidden_size)
    critic = Critic(args.hidden_size)
    # [PPO-11] global gradient clipping, then [PPO-3] Adam with eps 1e-5; the (annealed)
    # learning rate is applied by hand each update, so the logged value is the one used.
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.scale_by_adam(eps=1e-5))
    num_envs, num_minibatches = args.num_envs, args.num_minibatches
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))  # [PPO-1] vectorised envs

    def shard_envs(x: jax.Array, axis: int = 0) -> jax.Array:
        """Constrain axis `axis` of x (an env or env-group axis) to be split along "data"."""
        spec_ = P(*([None] * axis), "data")
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec_))

    def env_keys(key: jax.Array) -> jax.Array:
        """[N, 2]: one key per global env index, the same whatever the device count."""
        env_index = shard_envs(jnp.arange(num_envs))  # [N]
        return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, env_index)

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
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(env_keys(reset_key), env_params)
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

    def rollout_step(state: RunnerState, _: None) -> tuple[RunnerState, Transition]:
        """Act in the N environments once. Parameters and statistics stay fixed."""
        key, action_key, step_key = jax.random.split(state.key, 3)
        policy = actor.apply(state.params.actor, normalize(state.obs, state.obs_rms, args.normalize_obs))
        action = policy.sample(env_keys(action_key))  # [N] or [N, A]
        log_prob = policy.log_prob(action)  # [N]
        env_action = action if spec.discrete else jnp.clip(action, low, high)  # clip to bounds
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            env_keys(step_key), state.env_state, env_action, env_params
        )
        done = jnp.logical_or(terminated, truncated)  # [N]
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        # Reward scaling: divide by the std of the discounted return (CleanRL's NormalizeReward)
        discounted_return = state.discounted_return * args.gamma + reward
        return_rms = state.return_rms
        if args.normalize_reward:
            return_rms = rms_update(return_rms, discounted_return)
            reward = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -10.0, 10.0)
        transition = Transition(
            obs=state.obs,
            action=action,
            log_prob=log_prob,
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
            key=key,
        )
        return state, transition

    def loss_fn(params: AgentParams, batch: Batch) -> tuple[jax.Array, LossInfo]:
        policy = actor.apply(params.actor, batch.obs)
        new_log_prob = policy.log_prob(batch.action)  # [N/G, T*G/M]
        policy_loss, old_approx_kl, approx_kl, clipfrac = policy_loss_fn(
            new_log_prob, batch.log_prob, batch.advantage, args.clip_coef
        )
        new_values = critic.apply(params.critic, batch.obs)  # [N/G, T*G/M]
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
        # The loss is a mean over the global minibatch, whose rows live on D devices: the
        # gradient is where GSPMD inserts the all-reduce (one, all leaves combined).
        grads, info = jax.grad(loss_fn, has_aux=True)(carry.params, minibatch)
        updates, opt_state = optimizer.update(grads, carry.opt_state, carry.params)
        updates = jax.tree.map(lambda u: -carry.learning_rate * u, updates)
        params = optax.apply_updates(carry.params, updates)
        return carry._replace(params=params, opt_state=opt_state), info

    def epoch(carry: EpochCarry, batch: Batch) -> tuple[EpochCarry, LossInfo]:
        """[PPO-6] one pass over the rollout [T, N] in shuffled, device-local minibatches."""
        key, perm_key = jax.random.split(carry.key)
        minibatches = shuffle_into_minibatches(batch, perm_key, num_minibatches, args.shuffle_group_envs)
        minibatches = jax.tree.map(lambda x: shard_envs(x, axis=1), minibatches)  # [M, N/G, T*G/M, ...]
        if args.norm_adv:
            minibatches = minibatches._replace(advantage=normalize_advantages(minibatches.advantage))

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
        state, traj = jax.lax.scan(rollout_step, state, None, args.num_steps)  # [T, N, ...]

        # Values of all observations at once (the critic is not needed while acting).
        def value(obs: jax.Array) -> jax.Array:
            return critic.apply(
                state.params.critic, normalize(obs, rollout_start.obs_rms, args.normalize_obs)
            )

        values = value(traj.obs)  # [T, N]
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
        batch = Batch(  # [T, N, ...], kept two-dimensional: N is the sharded axis
            obs=normalize(traj.obs, rollout_start.obs_rms, args.normalize_obs),
            action=traj.action,
            log_prob=traj.log_prob,
            value=values,
            advantage=advantages,
            target=targets,
        )

        learning_rate = annealed_learning_rate(args, state.update)
        key, epoch_key = jax.random.split(state.key)
        carry = EpochCarry(state.params, state.opt_state, learning_rate, epoch_key, jnp.asarray(False))
        carry, info = jax.lax.scan(
            lambda c, _: epoch(c, batch), carry, None, args.update_epochs
        )  # info: [E, M]

        obs_rms = state.obs_rms
        if args.normalize_obs:  # statistics for the next rollout, from this rollout's obs
            obs_rms = rms_update(obs_rms, traj.obs)
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
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds,
    the env axis sharded over all devices (the mesh is made here, over jax.devices())."""
    args = validate_args(args)
    return build_ppo(args, make_env(args.env_id), make_mesh()).train


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
    actor = Actor(spec.action_dim, spec.discrete, args.hidden_size)
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
    args = validate_args(args, num_devices=1)
    spec = make_env(args.env_id)
    template = jax.jit(build_ppo(args, spec, make_mesh(jax.devices()[:1])).init)(jax.random.PRNGKey(0))
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


def to_host(tree: Any) -> Any:
    """Numpy copies of a pytree of replicated arrays, on any process.

    A replicated array that spans other processes' devices cannot be fetched whole, but
    every process holds a full copy of it on its own devices.
    """

    def fetch(x: jax.Array) -> np.ndarray:
        return np.asarray(x) if x.is_fully_addressable else np.asarray(x.addressable_data(0))

    return jax.tree.map(fetch, tree)


def checkpoint_manager(run_dir: Path) -> ocp.CheckpointManager:
    """Orbax, synchronous. Multi-host safe: every process calls save/restore with the same
    directory and writes its own shards. Atomic: a step is written to a temporary
    directory and renamed when complete; the previous step is deleted only after that."""
    options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True, enable_async_checkpointing=False)
    return ocp.CheckpointManager((run_dir / "checkpoints").absolute(), options=options)


def has_checkpoint(run_dir: Path) -> bool:
    ckpt_dir = run_dir / "checkpoints"
    return ckpt_dir.is_dir() and any(p.name.isdigit() for p in ckpt_dir.iterdir())


def save_checkpoint(manager: ocp.CheckpointManager, update: int, state_of_seed: RunnerState) -> None:
    manager.save(update, args=ocp.args.StandardSave(state_of_seed))
    manager.wait_until_finished()


def load_checkpoint(manager: ocp.CheckpointManager, target: RunnerState) -> RunnerState:
    """target: jax.ShapeDtypeStruct leaves with the shardings to restore into."""
    return manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(target))


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
    "fsdp",
    "distributed",
    "coordinator_address",
    "num_processes",
    "process_id",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "eval_episodes",
}
DERIVED = {
    "batch_size",
    "minibatch_size",
    "num_iterations",
    "updates_per_chunk",
    "num_devices",
    "envs_per_device",
}


def fail(message: str) -> None:
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def resolve_run_dirs(args: Args) -> tuple[Args, list[Path]]:
    """New run: name one directory per seed (process 0 creates them). Resume: reload and
    check the saved Args.

    Every directory of a multi-seed run stores the same Args (seed = the first seed) plus
    its own "run_seed", so resuming any one of them continues all of them. All processes
    compute the same names: the time stamp is process 0's.
    """
    if args.resume is None:
        stamp = int(time.time())
        if jax.process_count() > 1:
            stamp = int(multihost_utils.broadcast_one_to_all(np.int32(stamp)))
        run_dirs = []
        for run_seed in range(args.seed, args.seed + args.num_seeds):
            run_dir = Path(args.output_dir) / f"{args.env_id}__{args.exp_name}__{run_seed}__{stamp}"
            if jax.process_index() == 0:
                run_dir.mkdir(parents=True, exist_ok=False)
                saved = {**asdict(args), "run_seed": run_seed}
                (run_dir / "args.json").write_text(json.dumps(saved, indent=2))
            run_dirs.append(run_dir)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices("run directories created")
        return args, run_dirs

    resume_dir = Path(args.resume)
    if not has_checkpoint(resume_dir) or not (resume_dir / "args.json").is_file():
        raise ArgsError(f"--resume {resume_dir}: not a run directory with args.json and checkpoints/")
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
        if not has_checkpoint(run_dir):
            raise ArgsError(
                f"--resume {resume_dir}: the run has {saved.num_seeds} seeds but {run_dir} has no checkpoint"
            )
    return saved, run_dirs


def start_distributed(args: Args) -> None:
    """--distributed: join the other processes. Before anything else touches JAX's backend."""
    if not args.distributed:
        return
    # CPU-only clusters (and the tests) need a collectives library; gloo ships with jaxlib.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)


def main() -> None:
    args = tyro.cli(Args)
    try:
        validate_distributed(args)
    except ArgsError as error:
        fail(str(error))
    start_distributed(args)
    is_main = jax.process_index() == 0  # only process 0 logs and writes the run directory
    try:  # every bad input is reported here, before anything compiles
        if args.resume is None:
            validate_args(args)
        args, run_dirs = resolve_run_dirs(args)
        validate_args(args)
    except ArgsError as error:
        fail(str(error))

    spec = make_env(args.env_id)
    mesh = make_mesh()
    ppo = build_ppo(args, spec, mesh)
    seeds = [int(d.name.split("__")[2]) for d in run_dirs]
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])  # [S, 2]
    shapes = jax.eval_shape(jax.vmap(ppo.init), keys)  # every leaf [S, ...]
    shardings = state_shardings(shapes, mesh, args.fsdp, seed_axis=True)
    replicated = NamedSharding(mesh, P())
    state = jax.jit(jax.vmap(ppo.init), out_shardings=shardings)(keys)
    managers = [checkpoint_manager(d) for d in run_dirs]
    if args.resume is not None:
        seed_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), shapes)
        seed_shardings = state_shardings(seed_shapes, mesh, args.fsdp, seed_axis=False)
        target = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), seed_shapes, seed_shardings
        )
        restored = [load_checkpoint(m, target) for m in managers]
        state = jax.jit(lambda *xs: jax.tree.map(lambda *x: jnp.stack(x), *xs), out_shardings=shardings)(
            *restored
        )
    done_updates = int(to_host(state.update)[0])
    first_chunk = done_updates // args.updates_per_chunk

    if args.resume is not None and is_main:  # drop points logged after the checkpoint
        for run_dir in run_dirs:
            path = run_dir / "metrics.jsonl"
            if path.exists():
                keep = [
                    line
                    for line in path.read_text().splitlines()
                    if json.loads(line)["global_step"] <= done_updates * args.batch_size
                ]
                path.write_text("".join(line + "\n" for line in keep))
    loggers = [RunLogger(d, args, s) for d, s in zip(run_dirs, seeds, strict=True)] if is_main else []

    # One chunk shape, compiled once; the state is donated and keeps its sharding.
    run_chunk = jax.jit(
        jax.vmap(ppo.run_chunk, in_axes=(0, None)),
        in_shardings=(shardings, replicated),
        out_shardings=(shardings, replicated),
        donate_argnums=0,
    )
    compile_start = time.perf_counter()
    compiled = run_chunk.lower(state, jnp.asarray(0, jnp.int32)).compile()
    all_finite = jax.jit(
        lambda params: jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(params)])),
        out_shardings=replicated,
    )
    seed_slice = jax.jit(lambda tree, i: jax.tree.map(lambda x: x[i], tree), static_argnums=1)
    if is_main:
        print(
            f"compiled one chunk ({args.updates_per_chunk} updates x {args.batch_size} steps, "
            f"{len(seeds)} seed(s), {args.num_devices} device(s) in {jax.process_count()} process(es), "
            f"{args.envs_per_device} envs per device) in {time.perf_counter() - compile_start:.1f}s"
        )

    stop_signal: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        stop_signal.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing")

    previous_handlers = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}

    train_start = time.perf_counter()
    steps_done_at_start = done_updates * args.batch_size
    for chunk in range(first_chunk, args.num_chunks):
        first_update = chunk * args.updates_per_chunk
        chunk_start = time.perf_counter()
        state, metrics = compiled(state, jnp.asarray(first_update, jnp.int32))
        metrics = to_host(metrics)  # [S, updates_per_chunk]
        chunk_seconds = time.perf_counter() - chunk_start
        num_valid = min(args.updates_per_chunk, args.num_iterations - first_update)

        losses = np.stack([metrics.value_loss, metrics.policy_loss])[:, :, :num_valid]
        params_finite = bool(to_host(all_finite(state.params)))
        if not np.isfinite(losses).all() or not params_finite:
            bad = np.argwhere(~np.isfinite(losses).all(axis=(0, 1)))
            bad_update = first_update + (int(bad[0, 0]) if len(bad) else num_valid - 1)
            print(
                f"error: non-finite loss or parameters at update {bad_update} "
                f"(global step {(bad_update + 1) * args.batch_size}); the last good checkpoint "
                f"(update {first_update}) is kept in {run_dirs[0].parent}",
                file=sys.stderr,
            )
            sys.exit(1)

        sps = num_valid * args.batch_size / chunk_seconds
        for i, logger in enumerate(loggers):
            for u in range(num_valid):
                values = {tag: float(getattr(metrics, name)[i, u]) for name, tag in METRIC_TAGS.items()}
                if u == num_valid - 1:
                    values["charts/SPS"] = sps
                logger.log((first_update + u + 1) * args.batch_size, values)
            logger.jsonl.flush()
        for i, manager in enumerate(managers):  # every process takes part in the save
            save_checkpoint(manager, first_update + num_valid, seed_slice(state, i))

        step = (first_update + num_valid) * args.batch_size
        recent = metrics.episodic_return[:, :num_valid]
        latest = (
            np.nanmean(recent[:, -max(1, num_valid // 4) :]) if np.isfinite(recent).any() else float("nan")
        )
        frac = step / (args.num_iterations * args.batch_size)
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        elapsed = time.perf_counter() - train_start
        overall_sps = (step - steps_done_at_start) * len(seeds) / max(elapsed, 1e-9)
        if is_main:
            print(
                f"[{bar}] {step:>10,}/{args.num_iterations * args.batch_size:,} steps | "
                f"{overall_sps:,.0f} SPS | return {latest:8.2f} | {elapsed:6.1f}s",
                flush=True,
            )
        stop = bool(stop_signal)
        if jax.process_count() > 1:  # a signal to any process stops all of them together
            stop = bool(multihost_utils.process_allgather(np.int32(stop)).any())
        if stop and chunk < args.num_chunks - 1:
            for logger in loggers:
                logger.close()
            if is_main:
                print(
                    f"stopped after update {first_update + num_valid}; checkpoint saved. "
                    f"Continue with: python {sys.argv[0]} --resume {run_dirs[0]}"
                )
            sys.exit(128 + (stop_signal[0] if stop_signal else signal.SIGTERM))
    for s, handler in previous_handlers.items():
        signal.signal(s, handler)

    # Final deterministic evaluation, every seed in one program (replicated: it is small).
    evaluate = jax.jit(jax.vmap(make_evaluate(args, spec)), out_shardings=replicated)
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    result = evaluate(state.params, state.obs_rms, eval_keys)
    returns, lengths = to_host(result.returns), to_host(result.lengths)
    final_params = to_host(jax.jit(lambda p: p, out_shardings=replicated)(state.params))
    obs_rms = to_host(state.obs_rms)
    if not is_main:  # every process took part in the programs above; only process 0 writes
        return
    for i, (run_dir, logger) in enumerate(zip(run_dirs, loggers, strict=True)):
        summary = eval_summary(EvalResult(returns[i], lengths[i], None))
        summary["global_step"] = args.num_iterations * args.batch_size
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        logger.log(summary["global_step"], {"eval/episodic_return": summary["mean"]})
        logger.close()
        plot_returns(run_dir, f"{args.env_id} PPO (GSPMD, {args.num_devices} devices) seed {seeds[i]}")
        if args.save_model:
            model = jax.tree.map(lambda x, i=i: x[i], {"params": final_params, "obs_rms": obs_rms})
            (run_dir / f"{args.exp_name}.flax").write_bytes(flax.serialization.to_bytes(model))
        if args.capture_video:
            episodes = to_host(result.env_states)
            first_episode = jax.tree.map(lambda x, i=i: x[i][:, 0], episodes)  # [T_max]
            frames = render_frames(spec, args.env_id, first_episode, int(lengths[i][0]))
            write_gif(run_dir / "videos" / "eval.gif", frames)
        print(
            f"{run_dir}: eval return {summary['mean']:.2f} +- {summary['std']:.2f} "
            f"over {summary['episodes']} episodes"
        )


if __name__ == "__main__":
    main()
