# Copyright (c) 2026 the vibe_rl authors. SPDX-License-Identifier: MIT (the text: vibe_rl's LICENSE file)
"""SimbaV2: SAC on hyperspherical networks, for continuous actions, the whole training compiled with
jax.lax.scan.

Algorithm: Lee et al. 2025, "Hyperspherical Normalization for Scalable Deep Reinforcement Learning" (ICML
2025, arXiv:2503.15149; the authors' code: github.com/dojeon-ai/SimbaV2). Soft Actor-Critic whose networks
keep every hidden vector and every weight vector on the unit sphere, with a categorical critic over a
bounded, normalised return. Its details are tagged `# [SIMBA-1]` to `# [SIMBA-14]` here and listed in
docs/simbav2_jax.md, with the flag that switches each design choice off (the paper's design study, as command
lines).

Run `python vibe_rl/simbav2_jax.py --env-id playground/CheetahRun --total-timesteps 100000`. Env steps are
counted as the published curves count them: simulator control steps, so 100k env steps with DM Control's
action repeat of 2 are 50k agent steps. It writes runs/{env_id}__{exp_name}__{seed}__{unix_time}/: args.json,
TensorBoard events, metrics.jsonl, checkpoints/ (replay buffer and statistics included), eval.json,
episodic_return.png. --resume RUN_DIR continues a run exactly.

How to read this file:
    1-3  Args, the hyperspherical networks (`l2_normalize`, `HyperDense`, `Scaler`, `HyperEmbedder`,
         `HyperLERPBlock`, `Actor`, `Critic`), the state (NamedTuples, a shape on every field).
    4    the math as small pure functions, each tested: `project_weights` (the unit-sphere projection),
         `categorical_target` and `categorical_loss` (the distributional critic), the running statistics of
         the observations and of the discounted return (`reward_scale`), `gamma_from_horizon`, the buffer.
    5    training. `iteration` is the steps between two logged points; a `step` acts (repeating the action
         `action_repeat` times), stores, and takes `updates_per_step` `update`s: the actor, the temperature,
         the critic, the target. `make_train(args)`: train(key).
    6    the evaluation policy (the mean action, repeated as in training), and `make_algorithm`.
    The algorithm calls a few helpers of the run harness (below the banner): make_env and env_spec (an
    EnvSpec), reset_envs and step_envs (gymnax's reset and step for N envs), one_seed_at_a_time (the init
    under vmap), require and require_positive, hyperparameters and with_hyperparameters. The rest of the
    harness is the machinery every vibe_rl script shares, word for word. Stop reading there.
"""

from __future__ import annotations

import os
import signal

if __name__ == "__main__":  # Ctrl-C while the imports below load quits at once, quietly (main() takes over)
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

# ===== 1. Arguments ==================================================================


@dataclass
class Args:
    # SimbaV2 (the authors' configs/agent/simbaV2.yaml, configs/env/dmc.yaml and configs/online_rl.yaml,
    # except the widths and the updates per step: docs/simbav2_jax.md, "The CPU configuration")
    env_id: str = "Pendulum-v1"
    """the id of the environment (continuous actions): a gymnax id, brax/<name> (Brax MuJoCo) or
    playground/<Task> (DeepMind Control Suite, MuJoCo Playground)"""
    total_timesteps: int = 100_000
    """total environment steps of the training, per seed, counted as simulator control steps (an agent step
    with --action-repeat 2 is 2 of them), rounded down to whole iterations"""
    num_envs: int = 1
    """the number of parallel environments (SimbaV2: 1)"""
    action_repeat: int | None = None
    """[SIMBA-12] env steps each action is held for (rewards summed); default: 2 on playground/ (DM Control's,
    as SimbaV2's runs), 1 elsewhere"""
    updates_per_step: int = 1
    """[SIMBA-12] gradient updates per agent step, the update-to-data ratio (SimbaV2's DM Control runs: 2)"""
    buffer_size: int = 100_000
    """the replay buffer's size in transitions (SimbaV2: 1M; 100k holds every agent step of a 200k-step
    run)"""
    batch_size: int = 256
    """the batch size of each update, sampled uniformly from the replay buffer"""
    learning_starts: int = 10_000
    """env steps of uniformly random actions before the first update (SimbaV2: 5,000 agent steps, 10k env
    steps with action repeat 2)"""
    gamma: float | None = None
    """[SIMBA-13] the discount factor; default: from the effective episode length L = time limit / action
    repeat, clip((L/5 - 1) / (L/5), 0.95, 0.995) (0.99 on DM Control)"""
    tau: float = 0.005
    """target critic smoothing coefficient in (0, 1] (1: a hard copy every update) [traced]"""
    learning_rate_init: float = 1e-4
    """the learning rate of the actor, critic and temperature (Adam) at the first update [traced]"""
    learning_rate_end: float = 5e-5
    """[SIMBA-11] the learning rate at the run's end, reached linearly (with --lr-decay) [traced]"""
    lr_decay: bool = True
    """[SIMBA-11] decay the learning rate linearly from --learning-rate-init to --learning-rate-end"""
    temp_initial_value: float = 0.01
    """[SIMBA-10] the temperature (entropy coefficient) alpha at the start"""
    target_entropy_coef: float = -0.5
    """[SIMBA-10] the temperature's target entropy is this times |A| [traced]"""
    actor_hidden_dim: int = 128
    """the actor's width"""
    actor_num_blocks: int = 1
    """the actor's residual (LERP) blocks"""
    critic_hidden_dim: int = 256
    """the critic's width (SimbaV2: 512; docs/simbav2_jax.md measures what it costs here)"""
    critic_num_blocks: int = 2
    """the critic's residual (LERP) blocks"""
    c_shift: float = 3.0
    """[SIMBA-2] the constant appended to the input before its l2 normalisation (with --shift)"""
    num_bins: int = 101
    """[SIMBA-7] atoms of the categorical critic, evenly spaced over [-g_max, g_max]"""
    g_max: float = 5.0
    """[SIMBA-8] the bound of the normalised return: the critic's support and the reward scale's bound"""
    clipped_double_q: bool | None = None
    """[SIMBA-14] twin critics and the min of the two; default: on where episodes can truly end (gymnax,
    Brax), off on playground/ (DM Control's tasks end only by the time limit), as SimbaV2"""
    # The design choices of SimbaV2's design study, each a flag that switches it off
    normalize_obs: bool = True
    """[SIMBA-1] normalise observations by their running mean and std (off: the paper's "no input norm")"""
    shift: bool = True
    """[SIMBA-2] append --c-shift to the input before its l2 normalisation (off: "no shift")"""
    weight_projection: bool = True
    """[SIMBA-4] project every weight vector back onto the unit sphere after each update"""
    distributional: bool = True
    """[SIMBA-7] the categorical critic and its cross-entropy loss (off: a scalar critic, MSE: "mse loss")"""
    normalize_reward: bool = True
    """[SIMBA-8] scale rewards by the running std of the discounted return (off: "no rew normalize")"""
    reward_bound: bool = True
    """[SIMBA-8] scale rewards also by at least max|G| / g_max, bounding the normalised return (off: "no rew
    bound")"""
    log_frequency: int = 1_000
    """env steps between two logged points (an iteration), which log their means"""


# ===== 2. The hyperspherical networks ================================================

EPS = 1e-8  # where a norm divides, and added after each ReLU so that no vector is all zeros
LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0  # SimbaV2's bounds of the policy's log-std


def l2_normalize(x: jax.Array, axis: int = -1) -> jax.Array:
    """x / ||x||_2 along axis: a point of the unit sphere (a zero vector stays near zero)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), EPS)


class HyperDense(nn.Module):
    """[SIMBA-3] a linear layer without bias, [..., in] -> [..., features]; its kernel [in, features] has unit
    columns (each output unit's weight vector lies on the sphere), kept so by project_weights."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.orthogonal(scale=1.0, column_axis=-2)
        kernel = self.param("kernel", init, (x.shape[-1], self.features))  # [in, features]
        return x @ kernel


class Scaler(nn.Module):
    """[SIMBA-5] a learnable per-unit scale s, [..., dim] -> s * x, s = initial at the start. The parameter is
    stored as `scale` and multiplied by initial / scale, so that Adam's steps move s at the rate of a
    parameter of size `scale` (SimbaV2's reparameterisation)."""

    dim: int
    initial: float  # s at the start
    scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        stored = self.param("scaler", nn.initializers.constant(self.scale), (self.dim,))  # [dim]
        return stored * (self.initial / self.scale) * x


class HyperEmbedder(nn.Module):
    """[SIMBA-2] the input onto the sphere: [..., d] -> append c_shift (with shift), l2-normalise, HyperDense,
    scale, l2-normalise -> [..., hidden_dim]. The shift keeps the input's norm, which l2 normalisation alone
    would erase, as the angle to the appended axis."""

    hidden_dim: int
    c_shift: float
    shift: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.shift:
            x = jnp.concatenate([x, jnp.full((*x.shape[:-1], 1), self.c_shift)], axis=-1)  # [..., d + 1]
        x = l2_normalize(x)
        scaler = math.sqrt(2.0 / self.hidden_dim)  # SimbaV2's init and scale of the hidden scalers
        return l2_normalize(Scaler(self.hidden_dim, scaler, scaler)(HyperDense(self.hidden_dim)(x)))


class HyperLERPBlock(nn.Module):
    """[SIMBA-6] a residual block on the sphere: x [..., h] -> normalise(x + alpha * (mlp(x) - x)), where
    mlp(x) = normalise(W2 relu(s * W1 x)) with a 4h inner layer, and alpha [h] a learnable interpolation (a
    Scaler, alpha = 1 / (blocks + 1) at the start, stored at scale 1 / sqrt(h))."""

    hidden_dim: int
    alpha_init: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inner = 4 * self.hidden_dim
        scaler = math.sqrt(2.0 / self.hidden_dim) / 2.0  # the hidden scalers' sqrt(2 / h), over sqrt(4)
        y = Scaler(inner, scaler, scaler)(HyperDense(inner)(x))  # [..., 4h]
        y = l2_normalize(HyperDense(self.hidden_dim)(nn.relu(y) + EPS))  # [..., h]
        alpha = Scaler(self.hidden_dim, self.alpha_init, 1.0 / math.sqrt(self.hidden_dim))
        return l2_normalize(x + alpha(y - x))  # LERP from x toward mlp(x), back onto the sphere


def encoder(x: jax.Array, hidden_dim: int, num_blocks: int, c_shift: float, shift: bool) -> jax.Array:
    """The torso of both networks, [..., d] -> [..., hidden_dim] on the unit sphere (called inside a
    module)."""
    x = HyperEmbedder(hidden_dim, c_shift, shift)(x)
    for _ in range(num_blocks):
        x = HyperLERPBlock(hidden_dim, alpha_init=1.0 / (num_blocks + 1))(x)
    return x


class Head(nn.Module):
    """A linear head: HyperDense, a Scaler (init 1), HyperDense, plus a bias: [..., h] -> [..., outputs]."""

    hidden_dim: int
    outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = Scaler(self.hidden_dim, 1.0, 1.0)(HyperDense(self.hidden_dim)(x))  # no nonlinearity, as SimbaV2
        return HyperDense(self.outputs)(x) + self.param("bias", nn.initializers.zeros, (self.outputs,))


def squashed_gaussian(
    mean: jax.Array, log_std: jax.Array, low: np.ndarray, high: np.ndarray
) -> distrax.Transformed:
    """[SIMBA-9] the policy, a tanh-squashed Gaussian rescaled to the env's bounds: a = scale * tanh(x) +
    bias, x ~ N(mean, exp(log_std)^2); mean, log_std [..., A]; low, high [A]."""
    scale, bias = (high - low) / 2.0, (high + low) / 2.0  # [A] each
    squash = distrax.Block(distrax.Chain([distrax.ScalarAffine(shift=bias, scale=scale), distrax.Tanh()]), 1)
    return distrax.Transformed(distrax.MultivariateNormalDiag(mean, jnp.exp(log_std)), squash)


class Actor(nn.Module):
    """normalised obs [..., obs_dim] -> the policy pi(.|obs), a distrax distribution over actions [..., A]."""

    spec: EnvSpec
    hidden_dim: int
    num_blocks: int
    c_shift: float
    shift: bool

    @nn.compact
    def __call__(self, obs: jax.Array) -> distrax.Transformed:
        x = encoder(obs, self.hidden_dim, self.num_blocks, self.c_shift, self.shift)  # [..., hidden_dim]
        mean = Head(self.hidden_dim, self.spec.action_dim)(x)  # [..., A]
        raw = Head(self.hidden_dim, self.spec.action_dim)(x)  # [..., A] the log-std's own head
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)  # into its bounds
        return squashed_gaussian(mean, log_std, self.spec.action_low, self.spec.action_high)


class Critic(nn.Module):
    """(normalised obs [..., obs_dim], action [..., A]) -> logits [..., outputs]: over the num_bins atoms of
    the normalised return ([SIMBA-7]), or the Q value itself (outputs 1, with --no-distributional)."""

    hidden_dim: int
    num_blocks: int
    c_shift: float
    shift: bool
    outputs: int

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)  # [..., obs_dim + A]
        x = encoder(x, self.hidden_dim, self.num_blocks, self.c_shift, self.shift)
        return Head(self.hidden_dim, self.outputs)(x)


# ===== 3. State ======================================================================

Params = Any  # a flax parameter pytree


class SimbaParams(NamedTuple):
    """The learned parameters (--save-model writes them with the observation statistics: SavedModel)."""

    actor: Params
    critic: Params  # the Q critics (2 with clipped double Q, else 1), stacked: every leaf [Q, ...]
    critic_target: Params  # their Polyak averages, [Q, ...]
    log_alpha: jax.Array  # [] the temperature is alpha = exp(log_alpha)


class RunningMeanStd(NamedTuple):
    """Running mean and variance of a stream of values (Chan et al.'s parallel merge)."""

    mean: jax.Array  # [obs_dim] for the observations, [] for the discounted return
    var: jax.Array  # same shape
    count: jax.Array  # [] values merged so far (from 1e-4)


class ReturnStats(NamedTuple):
    """[SIMBA-8] what the reward scale is computed from: the running discounted return G of each env and the
    statistics of every G seen."""

    discounted_return: jax.Array  # [N] G <- gamma * (1 - done) * G + r, per env
    rms: RunningMeanStd  # of G, scalars
    max_abs: jax.Array  # [] the largest |G| seen


class Transition(NamedTuple):
    """One agent step of the N envs, [N, ...]; the replay buffer's rows [R, N, ...]; a sample, `Batch`, [B,
    ...]."""

    obs: jax.Array  # [N, obs_dim] raw
    action: jax.Array  # [N, A] in the env's units
    reward: jax.Array  # [N] raw, summed over the repeated env steps
    next_obs: jax.Array  # [N, obs_dim] the real next observation (before auto-reset)
    terminated: jax.Array  # [N] float 1.0 where the episode truly ended


class ReplayBuffer(NamedTuple):
    """A ring of R rows (R = Sizes.buffer_rows) carried in the scan; a row holds one step of all N envs."""

    data: Transition  # [R, N, ...]
    position: jax.Array  # [] int32, the row written next
    filled: jax.Array  # [] int32, rows written so far (at most R)


class Learner(NamedTuple):
    """What the updates change: the parameters and their three Adam states."""

    params: SimbaParams
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    updates: jax.Array  # [] int32, updates taken so far


class Hyperparameters(NamedTuple):
    """The flags marked [traced] in Args: a run carries their values in its state instead of compiling them
    in, so a --sweep over them trains every configuration in one program. gamma is static (it may be
    derived)."""

    tau: jax.Array  # [] each
    learning_rate_init: jax.Array
    learning_rate_end: jax.Array
    target_entropy_coef: jax.Array


class RunnerState(NamedTuple):
    """Everything the training carries from one step to the next (and checkpoints)."""

    learner: Learner
    env_state: Any  # gymnax EnvState, batched over envs [N]
    obs: jax.Array  # [N, obs_dim] current observations, raw
    buffer: ReplayBuffer
    obs_rms: RunningMeanStd  # [SIMBA-1] of every observation acted in
    return_stats: ReturnStats  # [SIMBA-8]
    episode_return: jax.Array  # [N] return of the running episode
    episode_length: jax.Array  # [N] its env steps
    key: jax.Array
    hyper: Hyperparameters  # this run's values of the traced flags


class UpdateInfo(NamedTuple):  # one update's numbers, each []
    qf1_values: jax.Array  # mean Q1(s, a) over the batch, in normalised-return units
    qf_loss: jax.Array  # the critics' loss (cross-entropy, or MSE with --no-distributional)
    actor_loss: jax.Array
    entropy: jax.Array  # -mean log pi(a|s) of the actor's batch
    alpha: jax.Array  # the temperature the actor step used
    alpha_loss: jax.Array
    reward_scale: jax.Array  # what the batch's rewards were divided by


class StepStats(NamedTuple):
    """What one agent step adds to its iteration's Metrics; the iteration's scan stacks them to [T]."""

    return_sum: jax.Array  # [] summed return of the episodes that ended at this step
    length_sum: jax.Array  # [] their summed lengths (env steps)
    episodes: jax.Array  # [] how many ended
    learning_rate: jax.Array  # [] the rate of the step's updates, NaN before learning_starts
    gradient_steps: jax.Array  # [] updates taken so far
    update: UpdateInfo  # means over the step's updates, NaN before learning_starts


Batch = Transition  # [B, ...]


class Metrics(NamedTuple):
    """One iteration's metrics (one logged point): means over the episodes that ended in it or its updates,
    NaN where it has none. The episode means, then the learning rate and updates, then UpdateInfo's fields."""

    episodic_return: jax.Array  # [] mean return of the episodes that ended in the iteration
    episodic_length: jax.Array  # [] their mean length in env steps
    learning_rate: jax.Array  # [] the mean learning rate of its updates
    gradient_steps: jax.Array  # [] updates taken by its end
    qf1_values: jax.Array  # [] means over its updates, as UpdateInfo
    qf_loss: jax.Array
    actor_loss: jax.Array
    entropy: jax.Array
    alpha: jax.Array
    alpha_loss: jax.Array
    reward_scale: jax.Array


# ===== 4. The algorithm's math: small pure functions =================================


def project_weights(params: Params) -> Params:
    """[SIMBA-4] every HyperDense kernel [..., in, out] back onto the unit sphere: each column (the weight
    vector of one output unit) divided by its l2 norm. Scalers and biases stay as they are."""

    def project(path: tuple, leaf: jax.Array) -> jax.Array:
        names = [getattr(key, "key", "") for key in path]
        in_hyper_dense = any(str(name).startswith("HyperDense") for name in names)
        return l2_normalize(leaf, axis=-2) if in_hyper_dense and names[-1] == "kernel" else leaf

    return jax.tree_util.tree_map_with_path(project, params)


def gamma_from_horizon(max_episode_steps: int, action_repeat: int) -> float:
    """[SIMBA-13] TD-MPC2's heuristic, as SimbaV2's config: with L = max_episode_steps / action_repeat agent
    steps an episode, gamma = (L/5 - 1) / (L/5), clipped to [0.95, 0.995]. DM Control (1000 / 2): 0.99."""
    horizon = max_episode_steps / action_repeat / 5.0
    return float(min(max((horizon - 1.0) / horizon, 0.95), 0.995))


def support(num_bins: int, g_max: float) -> jax.Array:
    """[SIMBA-7] the critic's atoms, [Z] evenly spaced over [-g_max, g_max]."""
    return jnp.linspace(-g_max, g_max, num_bins)


def categorical_target(
    next_probs: jax.Array,
    reward: jax.Array,
    terminated: jax.Array,
    next_entropy_term: jax.Array,
    gamma: float,
    atoms: jax.Array,
) -> jax.Array:
    """[SIMBA-7] the distributional soft TD target, projected onto the atoms (C51's projection). Each atom z_j
    of the next state's distribution (probabilities next_probs [B, Z]) moves to r + gamma (1 - terminated)
    (z_j - alpha log pi(a'|s')), clipped into [z_0, z_Z-1]; its mass splits between the two atoms around it in
    proportion to closeness (a triangle kernel of width one atom). reward, terminated, next_entropy_term
    (alpha log pi(a'|s')): [B]. Returns the target probabilities [B, Z], each row summing to 1."""
    continuing = gamma * (1.0 - terminated)[:, None]  # [B, 1]
    moved = reward[:, None] + continuing * (atoms[None] - next_entropy_term[:, None])  # [B, Z]
    moved = jnp.clip(moved, atoms[0], atoms[-1])
    position = (moved - atoms[0]) / (atoms[1] - atoms[0])  # [B, Z] in atom units, within [0, Z - 1]
    index = jnp.arange(atoms.shape[0])  # [Z]
    weight = jnp.clip(1.0 - jnp.abs(position[:, :, None] - index[None, None]), 0.0, 1.0)  # [B, Z from, Z to]
    return jnp.einsum("bj,bji->bi", next_probs, weight)


def categorical_loss(logits: jax.Array, target_probs: jax.Array) -> jax.Array:
    """[SIMBA-7] cross-entropy of the predicted distribution (logits [..., B, Z]) to the target [B, Z], the
    mean over the batch: [...] (one per critic)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(jax.lax.stop_gradient(target_probs) * log_probs, axis=-1), axis=-1)


def rms_init(shape: tuple[int, ...]) -> RunningMeanStd:
    return RunningMeanStd(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4))


def rms_update(rms: RunningMeanStd, x: jax.Array) -> RunningMeanStd:
    """Merge values x [K, *shape] into the running statistics (Chan et al.'s parallel update)."""
    batch_mean, batch_var, batch_count = x.mean(0), x.var(0), x.shape[0]
    delta = batch_mean - rms.mean
    total = rms.count + batch_count
    mean = rms.mean + delta * batch_count / total
    m2 = rms.var * rms.count + batch_var * batch_count + delta**2 * rms.count * batch_count / total
    return RunningMeanStd(mean, m2 / total, total)


def normalize(obs: jax.Array, rms: RunningMeanStd, enabled: bool) -> jax.Array:
    """[SIMBA-1] obs [..., obs_dim] -> (obs - mean) / std (SimbaV2 clips nothing), when enabled."""
    return (obs - rms.mean) / jnp.sqrt(rms.var + EPS) if enabled else obs


def return_stats_init(num_envs: int) -> ReturnStats:
    return ReturnStats(jnp.zeros(num_envs), rms_init(()), jnp.asarray(0.0))


def return_stats_update(stats: ReturnStats, reward: jax.Array, done: jax.Array, gamma: float) -> ReturnStats:
    """[SIMBA-8] one agent step of the N envs: each env's discounted return so far, G_t = r_t + gamma G_t-1
    (G_t = r_t at an episode's first step), merged into the statistics of G and its largest |G|.
    reward [N]; done [N]: whether this step ended the episode (the next step's G starts afresh)."""
    discounted = stats.discounted_return + reward  # [N] G_t: it holds gamma G_t-1, 0 at a start
    rms = rms_update(stats.rms, discounted)
    max_abs = jnp.maximum(stats.max_abs, jnp.abs(discounted).max())
    return ReturnStats(gamma * (1.0 - done) * discounted, rms, max_abs)


def reward_scale(stats: ReturnStats, g_max: float, bounded: bool) -> jax.Array:
    """[SIMBA-8] what rewards are divided by: the running std of the discounted return, and, with the bound,
    at least max|G| / g_max, so that every normalised return seen lies in [-g_max, g_max], the critic's
    support."""
    std = jnp.sqrt(stats.rms.var + EPS)
    return jnp.maximum(std, stats.max_abs / g_max) if bounded else std


def buffer_init(rows: int, num_envs: int, obs_dim: int, action_dim: int) -> ReplayBuffer:
    zeros = lambda *shape: jnp.zeros((rows, num_envs, *shape))  # [R, N, *shape]
    data = Transition(zeros(obs_dim), zeros(action_dim), zeros(), zeros(obs_dim), zeros())
    return ReplayBuffer(data, position=jnp.asarray(0, jnp.int32), filled=jnp.asarray(0, jnp.int32))


def buffer_add(buffer: ReplayBuffer, transition: Transition) -> ReplayBuffer:
    """Write one step of the N envs at the ring position, overwriting the oldest row."""
    rows, position = buffer.data.obs.shape[0], buffer.position

    def write(store: jax.Array, value: jax.Array) -> jax.Array:  # store [R, N, ...], value [N, ...]
        return jax.lax.dynamic_update_index_in_dim(store, value.astype(store.dtype), position, 0)

    data = jax.tree.map(write, buffer.data, transition)
    return ReplayBuffer(data, (buffer.position + 1) % rows, jnp.minimum(buffer.filled + 1, rows))


def buffer_sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Batch:
    """batch_size transitions drawn uniformly (with replacement) from the filled rows."""
    row_key, env_key = jax.random.split(key)
    row_index = jax.random.randint(row_key, (batch_size,), 0, buffer.filled)  # [B]
    env_index = jax.random.randint(env_key, (batch_size,), 0, buffer.data.obs.shape[1])  # [B]
    return jax.tree.map(lambda x: x[row_index, env_index], buffer.data)


# ===== 5. Training: update, step, iteration, make_train ===============================


class Sizes(NamedTuple):
    """The sizes and settings derived from Args, in this one place (never command-line flags)."""

    total_steps: int  # agent steps of the run, num_iterations * T
    steps_per_iteration: int  # T agent steps, so a logged point every T * N * action_repeat env steps
    num_iterations: int  # the logged points
    buffer_rows: int  # R = buffer_size // num_envs
    env_steps_per_action: int  # [SIMBA-12] --action-repeat, or its default for the suite
    decay_updates: int  # [SIMBA-11] updates the learning rate decays over: total_steps * updates_per_step
    discount: float  # [SIMBA-13] gamma: --gamma, or from the effective episode length
    critics: int  # [SIMBA-14] Q: 2 with clipped double Q, else 1


class Setup(NamedTuple):
    """Everything built once from Args (by build_setup, below); every function of this section takes it."""

    args: Args
    sizes: Sizes
    spec: EnvSpec
    actor: Actor
    critic: Critic  # one critic; critic_values applies the Q of them
    optimizer: optax.GradientTransformation  # Adam at the (decaying) rate; each part has its own state


def make_optimizer(args: Args, sizes: Sizes) -> optax.GradientTransformation:
    """[SIMBA-11] Adam whose rate decays linearly from learning_rate_init to learning_rate_end over the run's
    updates (its count is in the optimizer's state), or stays at learning_rate_init with --no-lr-decay."""
    if not args.lr_decay:
        return optax.adam(args.learning_rate_init)
    schedule = optax.linear_schedule(args.learning_rate_init, args.learning_rate_end, sizes.decay_updates)
    return optax.adam(schedule)


def learning_rate(args: Args, sizes: Sizes, updates: jax.Array) -> jax.Array:
    """[SIMBA-11] the rate of the update after `updates` of them, as make_optimizer's Adam applies it."""
    if not args.lr_decay:
        return jnp.asarray(args.learning_rate_init, jnp.float32)
    fraction = jnp.minimum(updates / sizes.decay_updates, 1.0)
    return args.learning_rate_init + fraction * (args.learning_rate_end - args.learning_rate_init)


def run_setup(setup: Setup, hyper: Hyperparameters) -> Setup:
    """The setup of one run: args holding its traced flags' values, and the optimizer built from them."""
    args = with_hyperparameters(setup.args, hyper)
    return setup._replace(args=args, optimizer=make_optimizer(args, setup.sizes))


def critic_outputs(setup: Setup, critic_params: Params, obs: jax.Array, action: jax.Array) -> jax.Array:
    """The Q critics in one call (their parameters stacked [Q, ...]): [B, ...] -> outputs [Q, B, Z or 1]."""
    return jax.vmap(setup.critic.apply, in_axes=(0, None, None))(critic_params, obs, action)


def q_values(setup: Setup, outputs: jax.Array) -> jax.Array:
    """Critic outputs [Q, B, Z or 1] -> Q values [Q, B]: the distribution's mean over the atoms, or the
    value."""
    if not setup.args.distributional:
        return outputs[..., 0]
    return jnp.sum(jax.nn.softmax(outputs, axis=-1) * support(setup.args.num_bins, setup.args.g_max), axis=-1)


def apply_adam(setup: Setup, grads: Params, opt_state: optax.OptState, params: Params) -> tuple[Params, Any]:
    updates, opt_state = setup.optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def actor_step(
    setup: Setup, learner: Learner, batch: Batch, key: jax.Array
) -> tuple[Learner, jax.Array, tuple]:
    """The actor's update, minimising E[alpha log pi(a|s) - min_Q Q(s, a)], a ~ pi(.|s) reparameterised;
    then its weights back onto the sphere. Returns the learner, the batch's log pi(a|s) [B] and (loss,
    alpha)."""
    params, alpha = learner.params, jnp.exp(learner.params.log_alpha)

    def loss(actor_params: Params) -> tuple[jax.Array, jax.Array]:
        action, log_prob = setup.actor.apply(actor_params, batch.obs).sample_and_log_prob(seed=key)
        q = q_values(setup, critic_outputs(setup, params.critic, batch.obs, action))  # [Q, B]
        return jnp.mean(alpha * log_prob - jnp.min(q, axis=0)), log_prob  # [SIMBA-14] min of Q = 1 is Q

    (actor_loss, log_prob), grads = jax.value_and_grad(loss, has_aux=True)(params.actor)
    actor, actor_opt = apply_adam(setup, grads, learner.actor_opt, params.actor)
    actor = project_weights(actor) if setup.args.weight_projection else actor  # [SIMBA-4]
    learner = learner._replace(params=params._replace(actor=actor), actor_opt=actor_opt)
    return learner, log_prob, (actor_loss, alpha)


def alpha_step(setup: Setup, learner: Learner, log_prob: jax.Array) -> tuple[Learner, jax.Array, jax.Array]:
    """[SIMBA-10] the temperature's update: minimise alpha * (H - target_entropy) over log_alpha, H = -mean
    log pi the actor's batch (held fixed): alpha grows while the entropy is below the target, shrinks above
    it."""
    entropy = -jnp.mean(jax.lax.stop_gradient(log_prob))
    target_entropy = setup.args.target_entropy_coef * setup.spec.action_dim
    loss = lambda log_alpha: jnp.exp(log_alpha) * (entropy - target_entropy)
    alpha_loss, grad = jax.value_and_grad(loss)(learner.params.log_alpha)
    log_alpha, alpha_opt = apply_adam(setup, grad, learner.alpha_opt, learner.params.log_alpha)
    learner = learner._replace(params=learner.params._replace(log_alpha=log_alpha), alpha_opt=alpha_opt)
    return learner, entropy, alpha_loss


# The done convention, used by the critic's targets and by the step:
#   terminated: the episode truly ended (the MDP stops), so nothing is bootstrapped after it.
#   truncated:  the time limit cut the episode; the state it reached still has a value. The buffer's next_obs
#               is the real observation reached (before the auto-reset), and the target bootstraps from it, so
#               only `terminated` enters the target.
def critic_step(setup: Setup, learner: Learner, batch: Batch, key: jax.Array) -> tuple[Learner, Any, Any]:
    """The critics' update toward the soft TD target of the new actor and temperature, then their weights back
    onto the sphere. Returns the learner, the critics' loss and Q1's mean value."""
    args, params = setup.args, learner.params
    gamma, alpha = setup.sizes.discount, jnp.exp(params.log_alpha)
    next_action, next_log_prob = setup.actor.apply(params.actor, batch.next_obs).sample_and_log_prob(seed=key)
    next_outputs = critic_outputs(setup, params.critic_target, batch.next_obs, next_action)  # [Q, B, Z or 1]
    next_q = q_values(setup, next_outputs)  # [Q, B]
    if args.distributional:
        # [SIMBA-14] the target distribution: that of the target critic with the lower mean, per transition
        lowest = jnp.argmin(next_q, axis=0)  # [B]
        next_logits = jnp.take_along_axis(next_outputs, lowest[None, :, None], axis=0)[0]  # [B, Z]
        atoms = support(args.num_bins, args.g_max)
        target = categorical_target(
            jax.nn.softmax(next_logits), batch.reward, batch.terminated, alpha * next_log_prob, gamma, atoms
        )  # [B, Z]
        per_critic = lambda outputs: categorical_loss(outputs, target)  # [Q]
    else:  # --no-distributional: a scalar critic and the mean squared TD error (the paper's "MSE loss")
        soft_next_value = next_q.min(0) - alpha * next_log_prob  # [B] the soft value of the next state
        target = batch.reward + gamma * (1.0 - batch.terminated) * soft_next_value  # [B]
        per_critic = lambda outputs: jnp.mean((outputs[..., 0] - jax.lax.stop_gradient(target)) ** 2, axis=-1)

    def loss(critic_params: Params) -> tuple[jax.Array, jax.Array]:
        outputs = critic_outputs(setup, critic_params, batch.obs, batch.action)  # [Q, B, Z or 1]
        return per_critic(outputs).sum(), q_values(setup, outputs)[0].mean()

    (critic_loss, q1), grads = jax.value_and_grad(loss, has_aux=True)(params.critic)
    critic, critic_opt = apply_adam(setup, grads, learner.critic_opt, params.critic)
    critic = project_weights(critic) if args.weight_projection else critic  # [SIMBA-4]
    return learner._replace(params=params._replace(critic=critic), critic_opt=critic_opt), critic_loss, q1


def update(
    setup: Setup,
    buffer: ReplayBuffer,
    obs_rms: RunningMeanStd,
    scale: jax.Array,
    learner: Learner,
    key: jax.Array,
) -> tuple[Learner, UpdateInfo]:
    """One SimbaV2 update, in the authors' order: the actor, the temperature, the critics (toward the new
    actor's target), the Polyak target. scale: [] what rewards are divided by ([SIMBA-8])."""
    args = setup.args
    sample_key, actor_key, critic_key = jax.random.split(key, 3)
    batch = buffer_sample(buffer, sample_key, args.batch_size)  # [B, ...] raw
    # [SIMBA-1] [SIMBA-8] the buffer keeps raw data; a batch is normalised with the current statistics
    norm = lambda obs: normalize(obs, obs_rms, args.normalize_obs)  # [B, obs_dim]
    batch = batch._replace(obs=norm(batch.obs), next_obs=norm(batch.next_obs), reward=batch.reward / scale)
    learner, log_prob, (actor_loss, alpha) = actor_step(setup, learner, batch, actor_key)
    learner, entropy, alpha_loss = alpha_step(setup, learner, log_prob)
    learner, critic_loss, q1 = critic_step(setup, learner, batch, critic_key)
    params = learner.params
    # tau * online + (1 - tau) * target
    target = optax.incremental_update(params.critic, params.critic_target, args.tau)
    learner = learner._replace(params=params._replace(critic_target=target), updates=learner.updates + 1)
    return learner, UpdateInfo(q1, critic_loss, actor_loss, entropy, alpha, alpha_loss, scale)


def repeat_action(
    setup: Setup, key: jax.Array, env_state: Any, action: jax.Array
) -> tuple[EnvStep, jax.Array]:
    """[SIMBA-12] hold the action [N, A] for action_repeat env steps, summing the rewards; an env whose
    episode ends within them stops there (its later repeats are discarded): its final observation, terminated
    and truncated are those of the step that ended it, and it starts its next episode at the next agent step.
    Returns that EnvStep [N] and each env's env steps taken [N]."""
    spec, num_envs = setup.spec, setup.args.num_envs

    def repeat(
        carry: tuple[EnvStep, jax.Array], step_key: jax.Array
    ) -> tuple[tuple[EnvStep, jax.Array], jax.Array]:
        previous, ended = carry  # ended [N]: an earlier repeat ended the episode
        out = step_envs(spec, jax.random.split(step_key, num_envs), previous.state, action)
        out = out._replace(reward=previous.reward + out.reward * ~ended)
        keep = lambda old, new: jnp.where(ended.reshape(ended.shape + (1,) * (new.ndim - 1)), old, new)
        out = jax.tree.map(keep, previous, out)._replace(reward=out.reward)
        return (out, ended | out.terminated | out.truncated), ~ended

    first = step_envs(spec, jax.random.split(key, num_envs), env_state, action)
    done = first.terminated | first.truncated
    keys = jax.random.split(jax.random.fold_in(key, 1), setup.sizes.env_steps_per_action - 1)
    (out, _), taken = jax.lax.scan(repeat, (first, done), keys)  # taken [action_repeat - 1, N]
    return out, 1 + taken.sum(0, dtype=jnp.int32)


def step(setup: Setup, state: RunnerState, index: jax.Array) -> tuple[RunnerState, StepStats]:
    """One agent step: act in the N envs (the action held for action_repeat env steps), store the transition,
    update the statistics, and take updates_per_step updates once learning_starts env steps are done.
    index: [] int32, the step's number (not batched over seeds)."""
    args, sizes, spec, num_envs = setup.args, setup.sizes, setup.spec, setup.args.num_envs
    key, policy_key, random_key, step_key, learn_key = jax.random.split(state.key, 5)

    # ACT: uniformly random actions until learning_starts env steps have been taken
    policy = setup.actor.apply(
        state.learner.params.actor, normalize(state.obs, state.obs_rms, args.normalize_obs)
    )
    policy_action = policy.sample(seed=policy_key)  # [N, A]
    shape, low, high = (num_envs, spec.action_dim), spec.action_low, spec.action_high
    random_action = jax.random.uniform(random_key, shape, minval=low, maxval=high)  # [N, A]
    learning = index * num_envs * sizes.env_steps_per_action >= args.learning_starts  # []
    action = jnp.where(learning, policy_action, random_action)
    out, env_steps = repeat_action(setup, step_key, state.env_state, action)  # [SIMBA-12] env_steps [N]

    # STORE the real next observation, before the auto-reset; then the statistics of what was seen
    buffer = buffer_add(
        state.buffer, Transition(state.obs, action, out.reward, out.final_obs, out.terminated * 1.0)
    )
    done = jnp.logical_or(out.terminated, out.truncated)  # [N]
    obs_rms = rms_update(state.obs_rms, state.obs) if args.normalize_obs else state.obs_rms  # [SIMBA-1]
    return_stats = return_stats_update(state.return_stats, out.reward, done, sizes.discount)  # [SIMBA-8]
    # [] what the batches' rewards are divided by (1 with --no-normalize-reward)
    scale = reward_scale(return_stats, args.g_max, args.reward_bound) if args.normalize_reward else 1.0

    # LEARN: [SIMBA-12] updates_per_step updates, each on its own batch
    def learn(learner: Learner) -> tuple[Learner, UpdateInfo]:
        keys = jax.random.split(learn_key, args.updates_per_step)
        learner, infos = jax.lax.scan(functools.partial(update, setup, buffer, obs_rms, scale), learner, keys)
        return learner, jax.tree.map(jnp.mean, infos)  # infos: [updates_per_step]

    no_learning = lambda same: (same, UpdateInfo(*(jnp.asarray(jnp.nan) for _ in UpdateInfo._fields)))
    rate = learning_rate(args, sizes, state.learner.updates)
    learner, info = jax.lax.cond(learning, learn, no_learning, state.learner)
    episode_return, episode_length = state.episode_return + out.reward, state.episode_length + env_steps
    reset = lambda x: jnp.where(done, 0, x)  # [N], an episode that ended starts again from 0
    episode = reset(episode_return), reset(episode_length)
    state = RunnerState(
        learner, out.state, out.obs, buffer, obs_rms, return_stats, *episode, key, state.hyper
    )
    ended = (episode_return * done).sum(), (episode_length * done).sum(), done.sum()
    return state, StepStats(*ended, jnp.where(learning, rate, jnp.nan), learner.updates, info)


def iteration(setup: Setup, state: RunnerState, index: jax.Array) -> tuple[RunnerState, Metrics]:
    """One iteration: the T = steps_per_iteration agent steps between two logged points, and their Metrics.
    index: [] int32, the iteration's number; its steps' numbers derive from it, unbatched."""
    setup = run_setup(setup, state.hyper)  # the traced flags, as this run's values
    per_iteration = setup.sizes.steps_per_iteration  # T
    steps = index * per_iteration + jnp.arange(per_iteration)  # [T] the steps' numbers
    state, stats = jax.lax.scan(functools.partial(step, setup), state, steps)  # stats [T]
    episodes = stats.episodes.sum()  # the episode means are NaN where none ended (the mean of nothing)
    episode_means = stats.return_sum.sum() / episodes, stats.length_sum.sum() / episodes
    rate, update_means = jax.tree.map(jnp.nanmean, (stats.learning_rate, stats.update))
    return state, Metrics(*episode_means, rate, stats.gradient_steps[-1] * 1.0, *update_means)


# --- Setting up: the sizes, the networks, the initial state ---------------------------


def build_setup(args: Args, spec: EnvSpec | None = None) -> Setup:
    """Check the flags (ArgsError: one line naming the flag), derive the sizes, build the parts.
    spec: another env than --env-id's (the tests' probe envs, through env_spec)."""
    spec = make_env(args.env_id) if spec is None else spec
    other = "use dqn_jax.py, c51_jax.py or ppo_jax_scan.py for Discrete actions"
    require(not spec.discrete, f"--env-id {args.env_id}: SimbaV2 needs continuous (Box) actions; {other}")
    flat = f"--env-id {args.env_id}: SimbaV2 needs flat observations, not {spec.obs_shape}"
    require(len(spec.obs_shape) == 1, flat)
    require_positive(args, "total_timesteps", "num_envs", "buffer_size", "batch_size", "updates_per_step")
    require_positive(args, "actor_hidden_dim", "critic_hidden_dim", "log_frequency")
    require(args.actor_num_blocks >= 0 and args.critic_num_blocks >= 0, "--*-num-blocks must be >= 0")
    require(
        args.action_repeat is None or args.action_repeat > 0, "--action-repeat must be a positive integer"
    )
    require(args.gamma is None or 0 <= args.gamma <= 1, f"--gamma must lie in [0, 1], got {args.gamma}")
    require(0 < args.tau <= 1, f"--tau must lie in (0, 1], got {args.tau}")
    rates = args.learning_rate_init > 0 and args.learning_rate_end > 0
    require(rates, "--learning-rate-init and --learning-rate-end must be positive")
    require(
        args.temp_initial_value > 0, f"--temp-initial-value must be positive, got {args.temp_initial_value}"
    )
    require(args.g_max > 0, f"--g-max must be positive, got {args.g_max}")
    require(args.num_bins >= 2, f"--num-bins must be at least 2, got {args.num_bins}")
    require(args.learning_starts >= 0, f"--learning-starts must be >= 0, got {args.learning_starts}")
    playground = args.env_id.startswith("playground/")
    action_repeat = args.action_repeat or (2 if playground else 1)  # [SIMBA-12] DM Control's 2, as SimbaV2
    per_step = args.num_envs * action_repeat  # env steps of one agent step
    steps = args.total_timesteps // per_step
    require(steps > 0, f"--total-timesteps must be at least --num-envs x the action repeat ({per_step})")
    # A logged point every log_frequency env steps, an iteration of T agent steps; the run is rounded down to
    # whole iterations, never T to the run
    per_iteration = min(max(1, args.log_frequency // per_step), steps)
    num_iterations = steps // per_iteration
    total_steps = num_iterations * per_iteration
    last = (total_steps - 1) * per_step  # the env step the last agent step starts at
    no_step = f"leaves no update (the last agent step starts at env step {last:,})"
    require(args.learning_starts <= last, f"--learning-starts {args.learning_starts} {no_step}")
    rows = args.buffer_size // args.num_envs
    require(rows > 0, "--buffer-size must be at least --num-envs")
    stored = {
        "the replay buffer (--buffer-size)": rows * args.num_envs,
        "the run": total_steps * args.num_envs,
    }
    for where, count in stored.items():  # a batch draws from the transitions stored
        too_big = f"--batch-size {args.batch_size} exceeds the {count:,} transitions of {where}"
        require(args.batch_size <= count, too_big)
    # [SIMBA-13] gamma from the effective episode length; [SIMBA-14] clipped double Q where episodes can end
    horizon_gamma = gamma_from_horizon(spec.params.max_steps_in_episode, action_repeat)
    gamma = args.gamma if args.gamma is not None else horizon_gamma
    double_q = args.clipped_double_q if args.clipped_double_q is not None else not playground
    sizes = Sizes(total_steps, per_iteration, num_iterations, rows, action_repeat,
                  total_steps * args.updates_per_step, gamma, 2 if double_q else 1)  # fmt: skip
    actor = Actor(spec, args.actor_hidden_dim, args.actor_num_blocks, args.c_shift, args.shift)
    outputs = args.num_bins if args.distributional else 1
    critic = Critic(args.critic_hidden_dim, args.critic_num_blocks, args.c_shift, args.shift, outputs)
    return Setup(args, sizes, spec, actor, critic, make_optimizer(args, sizes))


def init_params(setup: Setup, keys: jax.Array) -> tuple[Params, Params]:
    """The actor's and the Q critics' first parameters, every weight vector on the sphere ([SIMBA-4]);
    keys [1 + Q, 2]. The critics are initialised one after another (lax.map) and stacked, [Q, ...]."""
    obs_dim, action_dim = setup.spec.obs_shape[0], setup.spec.action_dim
    dummy_obs, dummy_action = jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim))
    actor = setup.actor.init(keys[0], dummy_obs)
    critic = jax.lax.map(lambda key: setup.critic.init(key, dummy_obs, dummy_action), keys[1:])  # [Q, ...]
    return project_weights(actor), project_weights(critic)


def init_state(setup: Setup, key: jax.Array) -> RunnerState:
    """The state of one seed before the first step."""
    args, spec, num_envs = setup.args, setup.spec, setup.args.num_envs
    key, params_key, reset_key = jax.random.split(key, 3)
    obs_dim = spec.obs_shape[0]
    # [SIMBA-14] Q critics; the orthogonal init is a QR, run one seed at a time under vmap (the harness's why)
    params_keys = jax.random.split(params_key, 1 + setup.sizes.critics)
    actor, critic = one_seed_at_a_time(functools.partial(init_params, setup))(params_keys)
    log_alpha = jnp.log(jnp.float32(args.temp_initial_value))  # [SIMBA-10] SimbaV2: alpha starts at 0.01
    params = SimbaParams(actor, critic, critic, log_alpha)
    init = setup.optimizer.init
    learner = Learner(params, init(actor), init(critic), init(log_alpha), jnp.asarray(0, jnp.int32))
    obs, env_state = reset_envs(spec, reset_key, num_envs)  # [N, obs_dim], [N]
    buffer = buffer_init(setup.sizes.buffer_rows, num_envs, obs_dim, spec.action_dim)
    zeros = jnp.zeros(num_envs)  # the running episodes' statistics
    return RunnerState(
        learner, env_state, obs, buffer, rms_init((obs_dim,)), return_stats_init(num_envs), zeros,
        zeros.astype(jnp.int32), key, hyperparameters(args),
    )  # fmt: skip


def make_train(args: Args, spec: EnvSpec | None = None) -> Callable[[jax.Array], tuple[RunnerState, Metrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds."""
    setup = build_setup(args, spec)

    def train(key: jax.Array) -> tuple[RunnerState, Metrics]:
        indices = jnp.arange(setup.sizes.num_iterations)  # the iterations' numbers
        return jax.lax.scan(functools.partial(iteration, setup), init_state(setup, key), indices)

    return train


# ===== 6. The evaluation policy, and SimbaV2 as the run harness sees it ==============


class SavedModel(NamedTuple):  # what --save-model writes and the evaluation acts with
    params: SimbaParams
    obs_rms: RunningMeanStd  # [SIMBA-1] the observation statistics


class HeldAction(NamedTuple):
    """[SIMBA-12] the evaluation policy's carry: the action held, and the env steps of the episode so far."""

    action: jax.Array  # [E, A]
    steps: jax.Array  # [E] int32


def hold_init(setup: Setup, model: SavedModel, num_episodes: int) -> HeldAction:
    return HeldAction(jnp.zeros((num_episodes, setup.spec.action_dim)), jnp.zeros(num_episodes, jnp.int32))


def greedy_action(
    setup: Setup, model: SavedModel, obs: jax.Array, held: HeldAction
) -> tuple[jax.Array, HeldAction]:
    """The evaluation policy, scale * tanh(mean) + bias (SimbaV2's temperature 0), chosen every action_repeat
    env steps and held in between, as in training: obs [E, obs_dim] -> actions [E, A]."""
    policy = setup.actor.apply(model.params.actor, normalize(obs, model.obs_rms, setup.args.normalize_obs))
    choose = (held.steps % setup.sizes.env_steps_per_action == 0)[:, None]  # [E, 1]
    action = jnp.where(choose, policy.bijector.forward(policy.distribution.mode()), held.action)
    return action, HeldAction(action, held.steps + 1)


def make_algorithm(args: Args) -> Algorithm:
    """SimbaV2 for the run harness (its fields are explained there); ArgsError for a bad flag."""
    setup = build_setup(args)
    sizes = setup.sizes
    return Algorithm(
        name="SimbaV2",
        sizes=sizes,
        env=setup.spec,
        env_steps_per_iteration=sizes.steps_per_iteration * args.num_envs * sizes.env_steps_per_action,
        init=functools.partial(init_state, setup),
        iteration=functools.partial(iteration, setup),
        metrics=Metrics,
        model=lambda state: SavedModel(state.learner.params, state.obs_rms),
        act=functools.partial(greedy_action, setup),
        act_init=functools.partial(hold_init, setup),
    )


# ===== Run harness: identical in every vibe_rl script. Nothing below is specific to one algorithm =====
# It reads in the order of a run's life: 1 the flags | 2 environments | 3 the suites | 4 planning the runs |
# 5 run directories and checkpoints | 6 the compiled programs | 7 the driver | 8 evaluation and outputs |
# 9 sweeps | 10 main. A step is one env step of every env; an iteration runs between two logged points; a
# chunk is several iterations compiled as one program, between which the driver logs, checkpoints and
# evaluates. docs/harness.md is its page (the contract with the algorithm above); its one source is the
# repository's tests/harness.py.
import atexit
import collections
import contextlib
import fcntl
import functools
import gc
import importlib
import itertools
import json
import math
import os
import resource
import shlex
import shutil
import signal
import socket
import sys
import time
import types
import typing
import warnings
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import crc32c
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tyro
from flax import struct
from flax.serialization import from_bytes, to_bytes
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import masked_crc32c

# --- 1. The flags: the algorithm's Args, then the run's and the machine's ------------------------------
SCRIPT = Path(__file__).name  # recorded in args.json: a run resumes only with the script that wrote it


@dataclass
class RunFlags:
    """the run and the machine: the same flags in every vibe_rl script"""

    exp_name: str = Path(__file__).stem  # the name of this experiment (part of the run directory's name)
    seed: int = 1
    """seed of the first run; with --num-seeds S the runs use seed, seed+1, ... (in [-2^31, 2^31))"""
    num_seeds: int = 1  # independent runs trained together in one program, sharded over the devices (<= 2^20)
    sweep: tuple[str, ...] = ()
    """a grid of configurations, each trained with every seed: NAME=V1,V2,... per flag. Flags marked [traced]
    share one program; each value of another flag compiles its own. Ranked in {env}__{exp}__sweep__{time}/"""
    track: bool = False  # mirror the metrics to Weights & Biases (works with WANDB_MODE=offline)
    wandb_project_name: str = "vibe_rl"  # the wandb project name
    wandb_entity: str | None = None  # the wandb entity (team)
    capture_video: bool = False  # write a video of one deterministic evaluation episode to videos/
    save_model: bool = False  # write the final parameters to {run_dir}/{exp_name}.flax
    output_dir: str = "runs"  # parent directory of the run directories
    resume: str | None = None  # continue the run in this run directory from its newest readable checkpoint
    num_chunks: int = 10  # the training runs as this many compiled chunks; logs between them
    checkpoint_frequency: int = 0
    """checkpoint every this many env steps, at chunk ends (0: a tenth of the run); the end and a stop too"""
    eval_episodes: int = 32  # episodes of each deterministic evaluation (run in parallel)
    eval_frequency: int = 0  # also evaluate every this many env steps, at chunk ends (0: only at the end)
    cpu_devices: int = 0
    """CPU devices with no accelerator, seeds sharded on them (0: a core each, more if seeds do not divide)"""
    jax_cache_dir: str = "~/.cache/vibe_rl/jax"
    """JAX's persistent compilation cache: a repeated configuration compiles fast ('' turns it off)"""
    sweep_max_programs: int = 32
    """refuse a --sweep of more programs than this (each value of a static flag compiles one)"""


def flags_class(algorithm: type, hyperparameters: type, make_algorithm: Callable) -> type[RunFlags]:
    """A script's Flags: every flag of a run, its Args' first (what args.json records and a resume reads
    back), carrying what the harness needs of the algorithm: Args, Hyperparameters, make_algorithm."""
    flags = dataclass(type("Flags", (RunFlags, algorithm), {"__module__": algorithm.__module__}))
    flags.Args, flags.Hyperparameters, flags.make_algorithm = algorithm, hyperparameters, make_algorithm
    groups = {"algorithm": algorithm, "run": RunFlags}  # what tyro parses: each group under its heading
    groups = [(name, typing.Annotated[group, tyro.conf.OmitArgPrefixes]) for name, group in groups.items()]
    flags.command_line = make_dataclass("CommandLine", groups)
    # the machine's, not read back from args.json; those a --resume may change (Args adds to each of them)
    flags.machine_flags = {"cpu_devices", "jax_cache_dir", *getattr(algorithm, "machine_flags", ())}
    flags.resume_may_change = {"checkpoint_frequency", "track", "wandb_project_name", "sweep_max_programs"}
    flags.resume_may_change |= {"wandb_entity", "capture_video", "save_model", *flags.machine_flags}
    flags.resume_may_change |= set(getattr(algorithm, "resume_may_change", ()))
    return flags


def parse_flags(flags: type[RunFlags], argv: list[str] | None = None) -> RunFlags:  # sys.argv's by default
    line = tyro.cli(flags.command_line, args=argv, description=(__doc__ or "").split("\n\n")[0])
    return flags(**asdict(line.algorithm), **asdict(line.run))


class ArgsError(ValueError): ...  # a bad flag's value: reported in one line, exit status 2, before compiling


def require(condition: Any, message: str) -> None:  # every check of a flag raises ArgsError through it
    if not condition:
        raise ArgsError(message)


def require_positive(args: RunFlags, *names: str, at_least: int = 1) -> None:
    for name in names:
        value, what = getattr(args, name), "a positive integer" if at_least else ">= 0"
        require(value >= at_least, f"--{name.replace('_', '-')} must be {what}, got {value}")


def hyperparameters(args: RunFlags) -> NamedTuple:  # the traced flags' values (the script's Hyperparameters)
    kind = type(args).Hyperparameters
    return kind(*(np.float32(getattr(args, name)) for name in kind._fields))


def with_hyperparameters(args: RunFlags, hyper: NamedTuple) -> RunFlags:  # in the program: traced arrays []
    return replace(args, **hyper._asdict())


def swept(args: RunFlags) -> list[str]:  # the names of the flags --sweep NAME=V1,V2 ... varies
    return [item.partition("=")[0].replace("-", "_") for item in args.sweep]


def label(config: RunFlags, between: str = ",") -> str:  # a configuration's point of the grid: name=value,...
    return between.join(f"{name}={getattr(config, name)}" for name in swept(config))


def flag_value(name: str, text: str, hint: Any) -> Any:  # a --sweep value as its flag's type (or None)
    flag = f"--{name.replace('_', '-')}"
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if text == "None" and type(None) in kinds:
        return None
    kind = next(k for k in kinds if k is not type(None))
    choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
    if kind is bool or choices:
        allowed = choices or ("True", "False")
        require(text in allowed, f"--sweep {name}={text}: {flag} takes {', '.join(map(str, allowed))}")
        return text if choices else text == "True"
    try:
        return kind(text)
    except ValueError:
        raise ArgsError(f"--sweep {name}={text}: {flag} takes a {kind.__name__}") from None


def sweep_grid(args: RunFlags) -> list[RunFlags]:  # the --sweep grid: the lists' product, the first slowest
    algorithm = [f.name for f in fields(type(args).Args) if f.name != "env_id"]
    hints, defaults, grid = typing.get_type_hints(type(args).Args), type(args)(), {}
    split = "a space split the list; write NAME=V1,V2 with no space, or quote it"
    for before, item in zip(args.sweep, args.sweep[1:], strict=False):  # a space inside NAME=V1, V2
        require("=" in item or not before.endswith(","), f"--sweep {before} {item}: {split}")
    for item in args.sweep:
        name, _, values = item.partition("=")
        name, flag = name.replace("-", "_"), f"--{name.replace('_', '-')}"
        require(values, f"--sweep {item}: write NAME=V1,V2,... (a flag's name, then its values)")
        require(name in algorithm, f"--sweep {name}: not a flag it sweeps; those are {', '.join(algorithm)}")
        require(name not in grid, f"--sweep {name}: given twice")
        given = args.resume is None and getattr(args, name) != getattr(defaults, name)  # a resume's: its own
        require(not given, f"--sweep {name}: also given as {flag}; give its values once")
        grid[name] = [flag_value(name, text, hints[name]) for text in values.split(",")]
        require(len(set(grid[name])) == len(grid[name]), f"--sweep {name}: a value given twice")
    points = itertools.product(*grid.values())  # one empty point without --sweep: [args]
    return [replace(args, **dict(zip(grid, point, strict=True))) for point in points]


def read_record(run_dir: Path) -> dict[str, Any]:
    """A run's args.json; ArgsError when it is missing, does not read, or is another script's run."""
    require((run_dir / "args.json").is_file(), f"--resume {run_dir}: not a run directory (no args.json)")
    try:
        record = json.loads((run_dir / "args.json").read_text())
        record.update(script=record.get("script", SCRIPT))  # older runs did not record it
    except (OSError, ValueError, AttributeError) as error:  # a torn, edited or unreadable file
        raise ArgsError(f"--resume {run_dir}: its args.json does not read ({type(error).__name__})") from None
    script = record["script"]
    require(script == SCRIPT, f"--resume {run_dir}: a run of {script}, not {SCRIPT}: resume it with {script}")
    return record


def args_from_record(flags: type[RunFlags], record: dict[str, Any], run_dir: Path) -> RunFlags:
    """The Flags a run recorded (its machine flags are this machine's), each of its flag's type."""
    defaults, given = flags(), {f.name: record[f.name] for f in fields(flags) if f.name in record}
    given.update({name: tuple(v) for name, v in given.items() if type(v) is list})  # JSON's --sweep
    for name, value in given.items():  # an edited args.json fails here, not as a traceback later
        default = getattr(defaults, name)
        typed = type(value) is type(default) or type(default) is float and type(value) is int
        require(default is None or typed, f"--resume {run_dir}: its args.json gives {name} = {value!r}")
    return flags(**{name: value for name, value in given.items() if name not in flags.machine_flags})


def run_of(path: Path) -> Path:  # itself, its args.json's folder, or the first run of a sweep's summary
    path = path.parent if path.name == "args.json" else path
    prefix, _, stamp = path.name.partition("__sweep__")
    if stamp and not (path / "args.json").exists():
        runs = sorted(d for d in path.parent.glob(f"{prefix}-*__*__{stamp}") if (d / "args.json").is_file())
        require(runs, f"--resume {path}: no run of this sweep lies beside it")
        return runs[0]
    return path


def resume_args(given: RunFlags) -> RunFlags:
    """With --resume, the run's own Flags (its args.json), the flags given agreeing; it writes where it is."""
    if given.resume is None:
        return given
    resumed = run_of(Path(given.resume))
    record, defaults, flags = read_record(resumed), type(given)(), type(given)
    args = args_from_record(flags, record, resumed)
    args = replace(args, resume=str(resumed), output_dir=str(resumed.parent))
    shown = lambda v: " ".join(v) if type(v) is tuple else v  # a --sweep's items
    for name in (f.name for f in fields(flags)):
        value, before, default = getattr(given, name), getattr(args, name), getattr(defaults, name)
        if name in flags.resume_may_change and value != default:
            setattr(args, name, value)
        ok = name in flags.resume_may_change or value in (default, before) or name == "resume"
        where = f"(a resume writes beside the run, in {resumed.parent})" if name == "output_dir" else ""
        flag = f"--{name.replace('_', '-')} {shown(value)}"
        conflict = f"--resume {given.resume}: {flag} conflicts with the run's {shown(before)} {where}"
        require(ok, conflict.strip())
    if given.cpu_devices == defaults.cpu_devices and type(record.get("cpu_devices")) is int:
        args.cpu_devices = record["cpu_devices"]
    return args


# Several processes (ppo_multigpu --distributed); with one, these are trivial
def is_main_process() -> bool:  # process 0 alone writes the run directories and prints
    return jax.process_index() == 0


def say(text: str) -> None:
    if is_main_process():
        print(text, flush=True)


def to_host(tree: Any) -> Any:  # every process's arrays [n, ...], gathered to [processes * n, ...]
    if jax.process_count() > 1:
        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


# --- 2. Environments: what every suite gives the algorithms, through gymnax's API ---------------------
class EnvStep(NamedTuple):  # N envs' step, as gymnax's env.step returns it
    obs: jax.Array  # [N, *obs_shape] the next observation: a fresh start where the episode ended
    state: Any  # the envs' state [N]
    reward: jax.Array  # [N]
    terminated: jax.Array  # [N] bool: the MDP ended
    truncated: jax.Array  # [N] bool: the time limit cut the episode
    final_obs: jax.Array  # [N, *obs_shape] the observation reached (info["final_observation"])
    info: jax.Array | None = None  # [N, K] what the suite tells of each episode that ended here (else 0)


def reset_every_step(spec: EnvSpec, keys: jax.Array, state: Any, action: jax.Array) -> EnvStep:
    """gymnax's step of N envs, each reset afresh where it ended (its cost: docs/harness.md, Resets)."""
    out = jax.vmap(spec.env.step, in_axes=(0, 0, 0, None))(keys, state, action, spec.params)
    return EnvStep(*out[:5], out[5]["final_observation"])


def reset_each(spec: EnvSpec, key: jax.Array, num_envs: int) -> tuple[jax.Array, Any]:
    """num_envs fresh episodes, each from gymnax's reset."""
    return jax.vmap(spec.env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), spec.params)


class EnvSpec(NamedTuple):  # an environment, and what the networks and the harness need to know of it
    env: Any  # a gymnax Environment: reset(key, params), step(key, state, action, params)
    params: Any  # its EnvParams (max_steps_in_episode: the time limit)
    obs_shape: tuple[int, ...]  # as the env gives them, e.g. [H, W, C] for MinAtar
    discrete: bool
    action_dim: int  # A: the discrete actions, or the dimensions of a Box
    action_low: np.ndarray  # [A] (empty for discrete actions)
    action_high: np.ndarray  # [A]
    binary_obs: bool = False  # every observation entry is 0 or 1 (MinAtar's channels), so uint8 holds it
    step: Callable[..., EnvStep] = reset_every_step  # (spec, keys [N, 2], state, action) -> N envs' step
    reset: Callable[..., tuple[jax.Array, Any]] = reset_each  # (spec, key, N) -> obs [N, ...], state [N]
    render: Callable[[Any, int, Path], None] | None = None  # (episode's states [T], length, folder): a video
    episodes: Callable[[Any], Any] | None = None  # the envs' state [N] -> their running episodes' (a pool's)

    # A suite's own numbers (docs/harness.md): K of each ended episode (EnvStep.info), their names, and one
    # env's state -> them; the metrics (env_state, episodic_return) -> (env_state, its counts cleared; {tag:
    # []}) logged after every iteration, their tags; and (returns [E], info [E, K]) -> what eval.json adds
    info_names: tuple[str, ...] = ()
    info_of: Callable[[Any], jax.Array] | None = None
    iteration_metrics: Callable[[Any, jax.Array], tuple[Any, dict[str, jax.Array]]] | None = None
    metric_tags: tuple[str, ...] = ()
    summary: Callable[[np.ndarray, np.ndarray], dict[str, Any]] | None = None


def env_spec(env: Any, params: Any, **suite: Any) -> EnvSpec:
    """The EnvSpec of any gymnax Environment instance and its params; suite: EnvSpec's defaulted fields."""
    space = env.action_space(params)
    discrete = hasattr(space, "n")  # a gymnax spaces.Discrete: n actions (a Box has a shape)
    action_dim = int(space.n) if discrete else math.prod(space.shape)
    box = lambda bound: np.broadcast_to(np.asarray(bound, np.float32), (action_dim,))  # [A]
    low, high = (np.zeros(0), np.zeros(0)) if discrete else (box(space.low), box(space.high))
    obs_shape = tuple(env.observation_space(params).shape)
    return EnvSpec(env, params, obs_shape, discrete, action_dim, low, high, **suite)


def reset_envs(spec: EnvSpec, key: jax.Array, num_envs: int) -> tuple[jax.Array, Any]:
    """num_envs fresh episodes: obs [N, *obs_shape], the envs' state [N]."""
    return spec.reset(spec, key, num_envs)


def step_envs(spec: EnvSpec, keys: jax.Array, state: Any, action: jax.Array) -> EnvStep:
    """One step of N envs (keys [N, 2]; state, action [N, ...]), each reset where its episode ended."""
    return spec.step(spec, keys, state, action)


def step_without_reset(spec: EnvSpec, keys: jax.Array, state: Any, action: jax.Array) -> EnvStep:
    """N envs' step, none reset yet: obs is the observation reached, as final_obs."""
    step = jax.vmap(spec.env.step_env, in_axes=(0, 0, 0, None))
    obs, state, reward, terminated, _ = step(keys, state, action, spec.params)
    truncated = jax.vmap(spec.env.is_truncated, in_axes=(0, None))(state, spec.params) & ~terminated
    return EnvStep(obs, state, reward, terminated, truncated, obs)


def where_ended(done: jax.Array, new: Any, old: Any) -> Any:  # per env [N, ...]: new where done, else old
    return jax.tree.map(lambda n, o: jnp.where(done.reshape(-1, *[1] * (o.ndim - 1)), n, o), new, old)


def lockstep_cond(pred: jax.Array, true_fn: Callable, false_fn: Callable, *operands: Any) -> Any:
    """jax.lax.cond, a real branch also under the runs' vmap: true_fn then runs for every run when any run's
    pred holds, so it must leave a run whose pred is false as false_fn would (tested bit for bit)."""

    @jax.custom_batching.custom_vmap
    def cond(pred: jax.Array, *operands: Any) -> Any:
        return jax.lax.cond(pred, true_fn, false_fn, *operands)

    @cond.def_vmap
    def every_run(size: int, batched: list, pred: jax.Array, *operands: Any) -> tuple:
        whole = lambda x, b: x if b else jnp.broadcast_to(x, (size, *x.shape))
        operands = jax.tree.map(whole, operands, tuple(batched[1:]))
        pred = pred.any() if batched[0] else pred
        out = jax.lax.cond(pred, jax.vmap(true_fn), jax.vmap(false_fn), *operands)
        return out, jax.tree.map(lambda _: True, out)

    return cond(pred, *operands)


def step_resetting_ended(spec: EnvSpec, keys: jax.Array, state: Any, action: jax.Array) -> EnvStep:
    """N envs' step, the ended reset in one batch, computed only at steps where one did (DM Control's)."""
    stepped = step_without_reset(spec, keys, state, action)
    done = stepped.terminated | stepped.truncated  # [N]

    def reset_ended(done: jax.Array, keys: jax.Array, obs: jax.Array, state: Any) -> tuple:
        reset_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, 1)  # keys itself stepped the envs
        fresh = jax.vmap(spec.env.reset_env, in_axes=(0, None))(reset_keys, spec.params)
        return where_ended(done, fresh, (obs, state))

    keep = lambda done, keys, obs, state: (obs, state)
    obs, state = lockstep_cond(done.any(), reset_ended, keep, done, keys, stepped.obs, stepped.state)
    return stepped._replace(obs=obs, state=state)


def save_gif(frames: list[np.ndarray], folder: Path) -> None:  # videos/eval.gif from frames [H, W, 3] uint8
    from PIL import Image

    # one palette for every frame: PIL would search one per frame, seconds per video
    sample = np.concatenate([frame[::2, ::2] for frame in frames[:: max(1, len(frames) // 16)]])
    palette = Image.fromarray(sample).quantize(255, Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    images = [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]
    images[0].save(folder / "eval.gif", save_all=True, append_images=images[1:], duration=1000 // 30, loop=0)


# --- 3. The suites: gymnax, Brax, Craftax, MuJoCo Playground; the table of their id prefixes ------------
CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")


def draw_gymnax(env_id: str, env: Any, params: Any, episode: Any, length: int, folder: Path) -> None:
    """videos/eval.gif: a MinAtar grid, or gymnasium's classic-control renderer (pygame), at each state."""
    states = [jax.tree.map(lambda x, t=t: np.asarray(x[t]), episode) for t in range(length)]
    if env_id.endswith("MinAtar"):
        import matplotlib

        colours = (np.vstack([[0, 0, 0], matplotlib.colormaps["tab10"].colors]) * 255).astype(np.uint8)
        grids = [np.asarray(env.get_obs(s, params)) for s in states]  # [10, 10, C] 0/1
        channels = [np.where(g.any(-1), g.argmax(-1) % 10 + 1, 0) for g in grids]  # [10, 10], 0: empty
        frames = [np.kron(colours[c], np.ones((24, 24, 1), np.uint8)) for c in channels]
    else:
        for driver in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):  # pygame draws off-screen, and plays no sound
            os.environ.setdefault(driver, "dummy")
        import gymnasium
        from gymnax.visualize.vis_gym import get_gym_state, set_gym_params

        gym_env = gymnasium.make(env_id, render_mode="rgb_array")
        gym_env.reset(seed=0)
        set_gym_params(gym_env.unwrapped, env_id, params)
        frames = []
        for state in states:
            gym_env.unwrapped.state = get_gym_state(state, env_id)
            if env_id == "Pendulum-v1":  # the torque arrow
                gym_env.unwrapped.last_u = np.asarray(state.last_u, np.float64)
            frames.append(gym_env.render())
        gym_env.close()
    save_gif(frames, folder)


def gymnax_suite(env_id: str) -> EnvSpec:
    import gymnax  # imported here: it starts JAX, which start_jax configures first

    known, suites = gymnax.registered_envs, ", ".join(f"{p}<name>" for p in ENV_SUITES if p.endswith("/"))
    suites += ", your own: module:callable"
    valid = f"valid: {', '.join(known)}; other suites: {suites}"
    require(env_id in known, f"--env-id {env_id!r} is not a gymnax environment; {valid}")
    (env, params), minatar = gymnax.make(env_id), env_id.endswith("MinAtar")
    drawn = minatar or env_id in CLASSIC_CONTROL  # MinAtar's grid, or gymnasium's renderer
    render = functools.partial(draw_gymnax, env_id, env, params) if drawn else None
    return env_spec(env, params, binary_obs=minatar, render=render)


def keep_mujoco_log_on_console() -> None:  # MuJoCo's warnings go to the console, never to MUJOCO_LOG.TXT in
    import mujoco  # the working directory (e.g. CheetahRun's and halfcheetah's model's deprecated attribute)

    config = mujoco.MjLogConfig.get()
    config.logto_file = False
    config.set()


def draw_brax(system: Any, episode: Any, length: int, folder: Path) -> None:  # videos/eval.html, its viewer
    from brax.io import html

    states = [jax.tree.map(lambda x, t=t: x[t], episode.brax.pipeline_state) for t in range(length)]
    (folder / "eval.html").write_text(html.render(system, states))


def brax_suite(name: str) -> EnvSpec:
    """Brax's task (its MuJoCo-faithful backend) as a gymnax env, built on the raw env: create's wrappers
    fold the time limit into done and restart from a cached state, overwriting the final observation."""
    require(importlib.util.find_spec("brax"), "Brax is not installed: pip install 'brax>=0.14.2,<0.15'")
    with contextlib.redirect_stdout(None):  # mujoco prints that its optional warp backend is missing
        from brax import envs
    from gymnax.environments import environment, spaces

    valid = ", ".join(f"brax/{n}" for n in sorted(envs._envs))
    require(name in envs._envs, f"--env-id brax/{name} is not a Brax environment; valid: {valid}")
    warnings.filterwarnings("ignore", "Brax System", UserWarning)  # that brax.envs is not developed further
    keep_mujoco_log_on_console()
    raw = envs.get_environment(name)

    @struct.dataclass
    class BraxState(environment.EnvState):
        brax: Any  # brax.envs.State: the physics state, obs, reward, done (its termination alone)

    class BraxEnv(environment.Environment):
        action_space = lambda self, params: spaces.Box(-1.0, 1.0, (raw.action_size,))
        observation_space = lambda self, params: spaces.Box(-jnp.inf, jnp.inf, (raw.observation_size,))

        def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, BraxState]:
            state = raw.reset(key)
            return state.obs, BraxState(time=0, brax=state)

        def step_env(self, key: jax.Array, state: BraxState, action: jax.Array, params: Any) -> tuple:
            brax = raw.step(state.brax, action)
            return brax.obs, BraxState(time=state.time + 1, brax=brax), brax.reward, brax.done > 0, {}

    params = environment.EnvParams(max_steps_in_episode=1000)
    return env_spec(BraxEnv(), params, render=functools.partial(draw_brax, raw.sys))


# Craftax: a reset generates a world, far dearer than a step (docs/harness.md, Craftax), so episodes start
# from a pool of fresh worlds generated ahead, in batches: each start serves one episode.
class Pooled(NamedTuple):  # N envs' running episodes, and the pool of starts their next episodes take
    env: Any  # [N] the running episodes' states
    start_obs: jax.Array  # [N, *obs_shape] the pool: fresh starts, one slot each, refilled in batches
    start: Any  # [N] their states
    fresh: jax.Array  # [N] bool: the slot holds a start no episode has taken
    clock: jax.Array  # [N] int32 steps since the reset, the same in every env: it times the refills
    dry_starts: jax.Array  # [N] int32 episodes begun from a taken start, the pool being empty (counted)
    ended: jax.Array  # [N] int32 episodes ended since the harness last read them (the logs)
    achieved: jax.Array  # [N, K] float32 their achievements, summed


POOL_REFILL_EVERY = 16  # steps between refills of N/8 starts: N/128 a step, which outlasts episodes of 128
# steps or more on average (Craftax-Classic's random policy's last about 190; docs/harness.md, Craftax)
CRAFTAX_TAGS = ("craftax/achievements", "craftax/score_percent", "craftax/dry_starts")
CRAFTAX_IDS = ("Craftax-Symbolic-v1", "Craftax-Classic-Symbolic-v1")
CRAFTAX_PIXEL_IDS = ("Craftax-Pixels-v1", "Craftax-Classic-Pixels-v1")  # refused in one line


def reset_pool(spec: EnvSpec, key: jax.Array, num_envs: int) -> tuple[jax.Array, Pooled]:
    """num_envs fresh episodes, and a full pool of num_envs more starts."""
    episodes, pool = jax.random.split(key)
    obs, env = reset_each(spec, episodes, num_envs)
    start_obs, start = reset_each(spec, pool, num_envs)
    zeros, achieved = jnp.zeros(num_envs, jnp.int32), jnp.zeros((num_envs, len(spec.info_names)))
    return obs, Pooled(env, start_obs, start, jnp.ones(num_envs, bool), zeros, zeros, zeros, achieved)


def refill_pool(spec: EnvSpec, due: jax.Array, key: jax.Array, pool: tuple) -> tuple:
    """The pool (start_obs, start, fresh) with N/8 new starts in its first taken slots when due (the runs'
    clocks agree, so lockstep_cond's branch is each run's own)."""

    def fill(key: jax.Array, pool: tuple) -> tuple:
        start_obs, start, fresh = pool
        size = max(1, len(fresh) // 8)
        slots = jnp.nonzero(~fresh, size=size, fill_value=len(fresh))[0]  # past the end: dropped
        new_obs, new = reset_each(spec, key, size)
        put = lambda old, new: old.at[slots].set(new, mode="drop")
        return put(start_obs, new_obs), jax.tree.map(put, start, new), fresh.at[slots].set(True, mode="drop")

    return lockstep_cond(due, fill, lambda key, pool: pool, key, pool)


def step_from_pool(spec: EnvSpec, keys: jax.Array, state: Pooled, action: jax.Array) -> EnvStep:
    """N envs' step without gymnax's reset of every env: the k-th ended env takes the pool's k-th untaken
    start (past those, a taken one: a dry start); its info: the ended episodes' achievements (info_of)."""
    stepped = step_without_reset(spec, keys, state.env, action)
    done = stepped.terminated | stepped.truncated  # [N]
    rank = jnp.cumsum(done)  # [N] 1 for the first ended env, 2 for the second, ...
    untaken_first = jnp.argsort(~state.fresh, stable=True)  # [N] the pool's slots
    slot = untaken_first[jnp.maximum(rank - 1, 0)]  # [N] the slot each ended env takes (used where done)
    taken = jnp.zeros(len(done), jnp.int32).at[slot].max(done.astype(jnp.int32)) > 0  # [N] slots taken now
    achieved = jax.vmap(spec.info_of)(stepped.state) * done[:, None]  # [N, K]
    due = (state.clock[0] + 1) % POOL_REFILL_EVERY == 0
    refill_key = jax.random.fold_in(keys[0], 1)  # keys[0] itself steps env 0
    pool = refill_pool(spec, due, refill_key, (state.start_obs, state.start, state.fresh & ~taken))
    env = where_ended(done, jax.tree.map(lambda x: x[slot], state.start), stepped.state)
    dry = done & (rank > state.fresh.sum())  # [N] ended envs that found no untaken start
    counts = (state.dry_starts + dry, state.ended + done, state.achieved + achieved)
    obs = where_ended(done, state.start_obs[slot], stepped.obs)
    return stepped._replace(obs=obs, state=Pooled(env, *pool, state.clock + 1, *counts), info=achieved)


def craftax_metrics(max_return: float, pooled: Pooled, episodic_return: jax.Array) -> tuple[Pooled, dict]:
    """The iteration's mean achievements (NaN where none ended), score (% of the maximum) and dry starts."""
    ended = pooled.ended.sum()
    achievements = jnp.where(ended > 0, pooled.achieved.sum() / jnp.maximum(ended, 1), jnp.nan)
    metrics = (achievements, 100 * episodic_return / max_return, pooled.dry_starts.sum())
    cleared = pooled._replace(ended=0 * pooled.ended, achieved=0 * pooled.achieved)
    return cleared, dict(zip(CRAFTAX_TAGS, metrics, strict=True))


def craftax_summary(names: tuple[str, ...], max_return: float, returns: np.ndarray, achieved: np.ndarray):
    """eval.json's score (the mean return's share of the maximum, in %) and each achievement's rate [K]."""
    rates = dict(zip(names, achieved.mean(0).tolist(), strict=True))
    return {"score_percent": 100 * float(np.mean(returns)) / max_return, "achievements": rates}


def draw_craftax(game: str, episode: Any, length: int, folder: Path) -> None:  # videos/eval.gif, its renderer
    renderer, constants = (importlib.import_module(f"{game}.{m}") for m in ("renderer", "constants"))
    size = constants.BLOCK_PIXEL_SIZE_IMG
    # its textures at one size, from the wheel's images (load_all_textures writes a cache into the wheel)
    renderer.load_all_textures = lambda: {size: constants.load_all_textures_given_size(size)}
    render = renderer.make_craftax_pixel_renderer(size)
    states = jax.tree.map(lambda x: x[:length], episode.craftax)
    frames = jax.jit(lambda s: jax.lax.map(render, s, batch_size=64))(states)  # [T, H, W, 3] in 0..255
    save_gif(list(np.asarray(frames).clip(0, 255).astype(np.uint8)), folder)


def craftax_suite(name: str) -> EnvSpec:
    """Craftax (Matthews et al. 2024) as a gymnax env, built on its NoAutoReset env, whose done folds the
    time limit into death: the adapter splits them. Episodes start from a pool of fresh worlds (Pooled)."""
    require(importlib.util.find_spec("craftax"), "Craftax is not installed: pip install craftax==1.6.1")
    valid = ", ".join(f"craftax/{n}" for n in CRAFTAX_IDS)
    pixels = "Craftax's pixel observations are not supported (docs/ppo_jax_scan.md, Craftax)"
    require(name not in CRAFTAX_PIXEL_IDS, f"--env-id craftax/{name}: {pixels}; valid: {valid}")
    require(name in CRAFTAX_IDS, f"--env-id craftax/{name} is not a Craftax environment; valid: {valid}")
    from craftax.craftax_env import make_craftax_env_from_name
    from gymnax.environments import environment, spaces

    raw = make_craftax_env_from_name(name, auto_reset=False)
    game = f"craftax.craftax{'_classic' * ('Classic' in name)}"
    constants = importlib.import_module(f"{game}.constants")
    rewards = getattr(constants, "ACHIEVEMENT_REWARD_MAP", np.ones(len(constants.Achievement)))  # Classic: 1s
    no_time_limit = raw.default_params.replace(max_timesteps=2**31 - 1)  # its game-over test, death alone

    @struct.dataclass
    class CraftaxState(environment.EnvState):
        craftax: Any  # Craftax's EnvState: the world, the player, its achievements

    @struct.dataclass
    class CraftaxParams(environment.EnvParams):
        craftax: Any = None  # Craftax's EnvParams

    class CraftaxEnv(environment.Environment):
        action_space = lambda self, params: spaces.Discrete(raw.num_actions)
        observation_space = lambda self, p: spaces.Box(0.0, 1.0, raw.observation_space(p.craftax).shape)

        def reset_env(self, key: jax.Array, params: CraftaxParams) -> tuple[jax.Array, CraftaxState]:
            obs, state = raw.reset_env(key, params.craftax)
            return obs, CraftaxState(time=state.timestep, craftax=state)

        def step_env(self, key: jax.Array, state: CraftaxState, action: jax.Array, params: Any) -> tuple:
            obs, craftax, reward, _, _ = raw.step_env(key, state.craftax, action, params.craftax)
            terminated = raw.is_terminal(craftax, no_time_limit)  # death, lava or the beaten boss
            return obs, CraftaxState(time=craftax.timestep, craftax=craftax), reward, terminated, {}

    params = CraftaxParams(max_steps_in_episode=raw.default_params.max_timesteps, craftax=raw.default_params)
    names, max_return = tuple(a.name.lower() for a in constants.Achievement), float(np.sum(rewards))
    achieved = lambda state: state.craftax.achievements.astype(jnp.float32)  # one env's [K], 1.0: unlocked
    pooled = dict(step=step_from_pool, reset=reset_pool, episodes=lambda pooled: pooled.env, info_of=achieved)
    score = dict(iteration_metrics=functools.partial(craftax_metrics, max_return), metric_tags=CRAFTAX_TAGS)
    score |= dict(info_names=names, summary=functools.partial(craftax_summary, names, max_return))
    return env_spec(CraftaxEnv(), params, **pooled, **score, render=functools.partial(draw_craftax, game))


def draw_playground(model: Any, structure: Any, episode: Any, length: int, folder: Path) -> None:  # Brax's
    from brax import base  # viewer, videos/eval.html, which draws an MjModel's bodies where they are
    from brax.io import html, mjcf

    warnings.filterwarnings("ignore", "Brax System", UserWarning)  # that brax's own models are not developed
    data = structure.unflatten(episode.physics).data  # mjx.Data [T]: body 0 is the world
    pose = lambda t: types.SimpleNamespace(x=base.Transform(pos=data.xpos[t, 1:], rot=data.xquat[t, 1:]))
    (folder / "eval.html").write_text(html.render(mjcf.load_model(model), [pose(t) for t in range(length)]))


def playground_suite(task: str) -> EnvSpec:
    """A DM Control task of MuJoCo Playground as a gymnax env, built on its env itself: its training wrapper
    restarts from a cached state, overwriting the final observation. All envs end together, at 1000 steps."""
    install = "pip install playground==0.2.0 (in vibe_rl's repository: pip install -e '.[playground]')"
    require(importlib.util.find_spec("mujoco_playground"), f"MuJoCo Playground is not installed: {install}")
    keep_mujoco_log_on_console()
    from gymnax.environments import environment, spaces
    from mujoco_playground import registry

    tasks = registry.dm_control_suite.ALL_ENVS
    download = (*registry.locomotion.ALL_ENVS, *registry.manipulation.ALL_ENVS)
    offline = f"offline only DM Control's run: {', '.join(f'playground/{n}' for n in tasks)}"
    assets = "needs assets that Playground downloads when it loads (locomotion, manipulation)"
    require(task not in download, f"--env-id playground/{task} {assets}; {offline}")
    require(task in tasks, f"--env-id playground/{task} is not a DM Control task of Playground; {offline}")
    raw = registry.load(task, config_overrides={"impl": "jax"})  # MJX in JAX (Playground's default: warp)
    # its State (an mjx.Data, obs, reward, done, metrics, info with its rng) as its leaves: flax's checkpoints
    # cannot serialize an mjx.Data, and the structure rebuilds it
    structure = jax.tree.structure(jax.eval_shape(raw.reset, jax.random.PRNGKey(0)))

    @struct.dataclass
    class PlaygroundState(environment.EnvState):
        physics: tuple  # Playground's State's leaves

    class PlaygroundEnv(environment.Environment):
        action_space = lambda self, params: spaces.Box(-1.0, 1.0, (raw.action_size,))
        observation_space = lambda self, params: spaces.Box(-jnp.inf, jnp.inf, (raw.observation_size,))

        def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, PlaygroundState]:
            state = raw.reset(key)
            return state.obs, PlaygroundState(time=0, physics=tuple(jax.tree.leaves(state)))

        def step_env(self, key: jax.Array, state: PlaygroundState, action: jax.Array, params: Any) -> tuple:
            stepped = raw.step(structure.unflatten(state.physics), action)  # its randomness: its info's rng
            terminated = stepped.done > 0  # a NaN in the physics: the only end of a DM Control task
            finite = lambda x: jnp.where(jnp.isfinite(x), x, 0.0)  # that step's NaN never reaches the learner
            state = PlaygroundState(state.time + 1, tuple(jax.tree.leaves(stepped)))
            return finite(stepped.obs), state, finite(stepped.reward), terminated, {}

    # every DM Control task's action_repeat is 1: Playground's env steps once per action (its wrapper repeats)
    params = environment.EnvParams(max_steps_in_episode=raw._config.episode_length)
    render = functools.partial(draw_playground, raw.mj_model, structure)
    return env_spec(PlaygroundEnv(), params, step=step_resetting_ended, render=render)


def user_suite(env_id: str) -> EnvSpec:
    """A user's own env, module:callable: the callable returns a gymnax Environment and its params."""
    from gymnax.environments import environment

    module, _, name = env_id.partition(":")
    sys.path += [os.getcwd()] * (os.getcwd() not in sys.path)  # as `python -m` finds it
    try:
        make = getattr(importlib.import_module(module), name, None)
    except Exception as error:  # its own error, or ImportError
        why = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
        raise ArgsError(f"--env-id {env_id}: {module} does not import ({why})") from None
    require(callable(make), f"--env-id {env_id}: {module} has no callable {name!r} (write module:callable)")
    made = make()
    is_env = type(made) is tuple and len(made) == 2 and isinstance(made[0], environment.Environment)
    require(is_env, f"--env-id {env_id}: {name}() must return (a gymnax Environment, its params)")
    return env_spec(*made)


# The suites: an id prefix, and the builder of an EnvSpec from the rest of the id. Adding a suite is
# adding an entry (docs/harness.md: the contract an EnvSpec meets, and the recipe). ":" is a user's own
# env's, module:callable: every id that holds a ':'.
ENV_SUITES: dict[str, Callable[[str], EnvSpec]] = {"": gymnax_suite, "brax/": brax_suite, ":": user_suite}
ENV_SUITES |= {"craftax/": craftax_suite, "playground/": playground_suite}
DRAWN = "classic-control, MinAtar, Brax, Craftax and Playground envs"  # the suites with EnvSpec.render


def make_env(env_id: str) -> EnvSpec:  # by the suite in ENV_SUITES whose prefix it has (the longest), or ":"
    prefix = ":" if ":" in env_id else max((p for p in ENV_SUITES if env_id.startswith(p)), key=len)
    return ENV_SUITES[prefix](env_id.removeprefix(prefix))


# --- 4. Planning the runs: the algorithm, the devices, the programs, the chunks, the memory -------------
# CleanRL's tags: charts/ for these metrics, losses/ for the others
CHARTS = ("episodic_return", "episodic_length", "learning_rate", "epsilon", "gradient_steps")


class Algorithm(NamedTuple):  # one script's algorithm, as its make_algorithm gives it to the harness
    name: str  # for the plot's title
    sizes: NamedTuple  # the sizes derived from the flags (args.json records them), num_iterations among them
    env: EnvSpec  # for the evaluation episodes and the video
    env_steps_per_iteration: int  # per seed
    init: Callable[[jax.Array], Any]  # key -> the state of one seed
    iteration: Callable[[Any, jax.Array], tuple[Any, Any]]  # (state, index []) -> (state, metrics)
    metrics: type  # the iteration's NamedTuple: a scalar per field, each logged; episodic_return among them
    model: Callable[[Any], Any]  # state -> what --save-model writes (and the non-finite check reads)
    act: Callable[..., Any]  # (model, obs [E, *obs_shape]) -> greedy actions [E, ...]; with act_init, below
    mesh: Mesh | None = None  # None: the harness shards the seeds over the devices, one seed per device
    state_specs: Callable[[Any], Any] | None = None  # with a mesh: state -> a PartitionSpec per leaf
    chunk_cpu_opt_level: int | None = None  # on a CPU, the chunk's XLA backend optimisation level
    # a recurrent policy: (model, E) -> its carry at the start; act is then (model, obs, carry) -> (a, carry)
    act_init: Callable[[Any, int], Any] | None = None
    num_iterations = property(lambda self: self.sizes.num_iterations)
    total_steps = property(lambda self: self.sizes.num_iterations * self.env_steps_per_iteration)  # per seed
    # what each iteration logs: the algorithm's metrics' tags, then its env suite's
    logged_tags = property(lambda self: [*self.metric_tags.values(), *self.env.metric_tags])

    @property
    def metric_tags(self) -> dict[str, str]:  # a metric's name -> its TensorBoard tag, CleanRL's
        return {name: f"{'charts' if name in CHARTS else 'losses'}/{name}" for name in self.metrics._fields}


class Deferred(types.ModuleType):  # in sys.modules for a module: imports it when an attribute is read
    def __getattr__(self, name: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def defer_renderer_imports() -> None:  # gymnax imports them for renderers unused here: loaded when first read
    for name in ("matplotlib.pyplot", "seaborn"):
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            sys.modules[name] = Deferred(name)


def programs(args: RunFlags) -> list[list[RunFlags]]:  # the grid grouped by static flags: a program each
    grouped, traced = {}, type(args).Hyperparameters._fields
    for config in sweep_grid(args):
        static = tuple(getattr(config, name) for name in swept(config) if name not in traced)
        grouped.setdefault(static, []).append(config)
    return list(grouped.values())


def cpu_device_count(runs: int, cores: int) -> int:
    """One CPU device per core, or where the runs do not divide, the fewest (<= 2x) with no padded slot."""
    unpadded = [count for count in range(cores, 2 * cores + 1) if runs % count == 0]
    return unpadded[0] if runs > cores and unpadded else cores


def start_jax(args: RunFlags) -> None:
    """Configure JAX before its backend starts (importing gymnax starts it): CPU devices, compile cache."""
    require(args.cpu_devices <= 1024, f"--cpu-devices must be at most 1024, got {args.cpu_devices}")
    defer_renderer_imports()
    if args.jax_cache_dir:  # a repeated configuration loads its compiled programs from disk, all of them
        jax.config.update("jax_compilation_cache_dir", str(Path(args.jax_cache_dir).expanduser()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        with contextlib.suppress(RuntimeError):  # JAX started already (main() called from Python)
            runs = len(programs(args)[0]) * args.num_seeds  # a program's runs: its configurations x seeds
            jax.config.update("jax_num_cpu_devices", args.cpu_devices or cpu_device_count(runs, cores))


class Run(NamedTuple):  # one program's runs (a configuration x a seed each): what it writes, how they lie
    args: RunFlags  # the first configuration's (its static flags are every run's)
    algo: Algorithm
    configs: list[RunFlags]  # R: each run's configuration (its --sweep grid point, else args), seeds fastest
    seeds: list[int]  # R: each run's seed
    dirs: list[Path]  # R: one run directory per run (none until they are made or found)
    iterations_per_chunk: int
    num_chunks: int  # every chunk has work; only the last may be partly masked
    mesh: Mesh  # its axis "seeds" splits the runs over the devices
    slots: int  # the runs padded to a multiple of that axis (the padding's results are discarded)
    each_run = lambda self: zip(self.configs, self.seeds, strict=True)  # (configuration, seed) of each run
    # where a sweep's summary goes: sweep_dir of the stamp its run directories' names end with
    summary_dir = property(lambda self: sweep_dir(self.args, self.dirs[0].name.rsplit("__", 1)[1]))

    def how_many(self) -> str:
        return f"{len(self.seeds)} {'runs (configurations x seeds)' if self.args.sweep else 'seed(s)'}"


def plan_chunks(num_iterations: int, num_chunks: int) -> tuple[int, int]:
    """(iterations per chunk, number of chunks): at most num_chunks chunks, every one with work."""
    per_chunk = math.ceil(num_iterations / min(num_chunks, num_iterations))
    return per_chunk, math.ceil(num_iterations / per_chunk)


def run_bytes(algo: Algorithm, episodes: int) -> tuple[int, int]:
    """The bytes of one run's state and of its evaluation's episodes (from init's and reset's shapes)."""
    reset = functools.partial(reset_envs, algo.env, num_envs=episodes)
    shapes = [jax.eval_shape(f, jax.random.PRNGKey(0)) for f in (algo.init, reset)]  # OverflowError: too big
    size = lambda tree: sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))
    return size(shapes[0]), size(shapes[1])


def sizing_flags(run: Run, rollout: bool) -> str:
    """The flags that size a run's memory: each integer flag that, halved (or else doubled), moves the bytes
    of the states and evaluations (with `rollout`, or an iteration's env steps) by a tenth or more."""

    def sizes(args: RunFlags) -> np.ndarray:  # a configuration's bytes (with rollout, an iteration's steps)
        algo = type(args).make_algorithm(args)
        nbytes = sum(run_bytes(algo, args.eval_episodes)) * args.num_seeds
        return np.array([nbytes, algo.env_steps_per_iteration][: 1 + rollout], float)

    base, named = sizes(run.args), []
    for name, value in vars(run.args).items():
        if type(value) is not int or value < 2 or name in ("seed", "total_timesteps", "eval_frequency"):
            continue
        for factor in (0.5, 2):
            try:
                ratio = sizes(replace(run.args, **{name: int(value * factor)})) / base
            except OverflowError:  # past an int32 index: a size
                ratio = np.array([math.inf])
            except ArgsError:  # the algorithm refuses it: try the other way
                continue
            named += [name] if (abs(np.log(ratio)) >= np.log(1.1)).any() else []
            break
    flags = [f"--{name.replace('_', '-')} {getattr(run.args, name)}" for name in named]
    many = [f"{len(run.seeds)} runs (--sweep x --num-seeds)"] if len(run.seeds) > 1 and run.args.sweep else []
    return ", ".join(flags + many) or "the sizes given"


def require_memory(run: Run, need: int, what: str, rollout: bool = False) -> None:
    """ArgsError, naming the flags that size it, where `need` bytes exceed the devices' (RAM: ulimit -v)."""
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    have = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit", 0) * run.mesh.size or ram
    if (limit := resource.getrlimit(resource.RLIMIT_AS)[0]) != resource.RLIM_INFINITY:
        have = min(have, limit)
    if need > have:
        needs = f"{what} need {need / 2**30:,.1f} GiB, more than the {have / 2**30:,.1f} GiB of this machine"
        raise ArgsError(f"{sizing_flags(run, rollout)}: {needs}")


def plan_run(configs: list[RunFlags], seeds: list[int]) -> Run:
    """The runs of configurations sharing a program, each with every seed: checked, and fitting the memory."""
    for config in reversed(configs):  # each passes the algorithm's checks; algo is the first's
        try:
            for name, value in vars(config).items():  # inf and nan pass "positive" and "in [0, 1]"
                finite = type(value) is not float or math.isfinite(value)
                require(finite, f"--{name.replace('_', '-')} must be a finite number, got {value}")
            algo = type(config).make_algorithm(config)
        except ArgsError as error:  # a sweep's named by its grid point
            raise ArgsError(f"--sweep {label(config, ' ')}: {error}" if config.sweep else error) from None
    args, runs = configs[0], len(configs) * len(seeds)
    require(algo.total_steps < 2**31, f"--total-timesteps {args.total_timesteps}: at most 2^31 - 1 per seed")
    require(algo.env.render or not args.capture_video, f"--capture-video renders {DRAWN}, not {args.env_id}")
    if (mesh := algo.mesh) is None:  # the fewest devices that spread the runs most evenly
        per_device = math.ceil(runs / min(runs, jax.device_count()))
        devices = jax.devices()[: math.ceil(runs / per_device)]
        mesh = jax.make_mesh((len(devices),), ("seeds",), axis_types=(AxisType.Auto,), devices=devices)
    slots = math.ceil(runs / mesh.shape["seeds"]) * mesh.shape["seeds"]
    evaluations = math.ceil(algo.total_steps / args.eval_frequency) if args.eval_frequency else 0
    chunks = plan_chunks(algo.num_iterations, max(args.num_chunks, evaluations))  # a chunk ends by each
    configs, seeds = [c for c in configs for _ in seeds], seeds * len(configs)  # [R]: the seeds vary fastest
    run = Run(args, algo, configs, seeds, [], *chunks, mesh, slots)
    try:
        state, episodes = run_bytes(algo, args.eval_episodes)
    except OverflowError as error:  # a size beyond an int32 index: e.g. --hidden-size 10**12
        raise ArgsError(f"the sizes given do not fit an array ({str(error).splitlines()[0]})") from None
    # the state three times (the chunk's input, output, the host's copy), the evaluation's carry in and out
    require_memory(run, (3 * state + 2 * episodes) * slots, "the training state and its evaluation")
    return run


def plan_runs(args: RunFlags) -> list[Run]:
    """Check the run's flags and every configuration of --sweep, and plan each program's runs."""
    require_positive(args, "num_seeds", "num_chunks", "eval_episodes")
    require_positive(args, "cpu_devices", "eval_frequency", "checkpoint_frequency", at_least=0)
    require(args.num_seeds <= 2**20, f"--num-seeds must be at most 2^20, got {args.num_seeds}")
    seeds = list(range(args.seed, args.seed + args.num_seeds))
    require(seeds[0] >= -(2**31) and seeds[-1] < 2**31, "--seed: every seed of the run lies in [-2^31, 2^31)")
    if args.track:  # no wandb login: say so now, not after compiling (on a terminal, wandb asks for a key)
        import wandb

        try:
            wandb.login(verify=False)  # offline and disabled modes need no key
        except wandb.errors.UsageError as error:
            raise ArgsError(f"--track: {error} Or set WANDB_MODE=offline.") from None
    grouped = programs(args)
    if args.sweep:
        configs = sum(map(len, grouped))
        count = f"{configs} configurations x {args.num_seeds} seed(s) = {configs * args.num_seeds} runs"
        say(f"sweep: {count}, in {len(grouped)} program(s) compiled one after another")
        static = sorted({n for n in swept(args) if n not in type(args).Hyperparameters._fields}) or ["none"]
        each = f"one per value of its static flags ({', '.join(static)})"
        cap = f"at most --sweep-max-programs {args.sweep_max_programs} (raise it to compile them all)"
        require(len(grouped) <= args.sweep_max_programs, f"--sweep: {len(grouped)} programs, {each}; {cap}")
    runs = [plan_run(configs, seeds) for configs in grouped]
    require(sum(len(run.configs) for run in runs) <= 2**20, "--sweep x --num-seeds: at most 2^20 runs")
    return runs


def say_plan(run: Run) -> None:  # one line where the run differs from its flags: whole iterations, chunks
    args, algo, notes = run.args, run.algo, []
    if algo.total_steps != args.total_timesteps:
        whole = f"({algo.num_iterations:,} iterations of {algo.env_steps_per_iteration:,})"
        notes.append(f"--total-timesteps {args.total_timesteps:,} trains {algo.total_steps:,} steps {whole}")
    if run.num_chunks != args.num_chunks:
        chunks = f"{run.num_chunks} chunks of {run.iterations_per_chunk} iterations"
        notes.append(f"--num-chunks {args.num_chunks} runs as {chunks}")
    if notes:
        say("; ".join(notes))


# --- 5. Run directories, their records and checkpoints ------------------------------------------------
CLAIMED: list[Path] = []  # the run directories this process has claimed, released as main returns


def run_name(config: RunFlags, seed: int | str, stamp: str) -> str:  # {env}__{exp}__{seed}__{time}
    experiment = f"{config.exp_name}-{label(config)}" if config.sweep else config.exp_name  # labelled
    return f"{config.env_id.replace('/', '-').replace(':', '-')}__{experiment}__{seed}__{stamp}"  # a:f: a-f


def sweep_dir(args: RunFlags, stamp: str) -> Path:  # where a sweep's summary goes, beside its runs
    return Path(args.output_dir) / run_name(replace(args, sweep=()), "sweep", stamp)


def write_atomic(path: Path, data: bytes) -> None:  # a temporary file renamed into place: never half-written
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def records(dirs: list[Path], name: str) -> dict[int, Any]:  # run i -> its JSON file `name`, where it has one
    return {i: json.loads((d / name).read_text()) for i, d in enumerate(dirs) if (d / name).is_file()}


def make_all(dirs: list[Path]) -> bool:  # made every directory (True), or none (False: one exists already)
    for k, run_dir in enumerate(dirs):
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:  # another run's name: undo
            for made in dirs[:k]:
                made.rmdir()
            return False
        except OSError as error:  # a read-only file system, an --output-dir that is a file, ...
            raise ArgsError(f"--output-dir {dirs[0].parent}: cannot write there ({error.strerror})") from None
    return True


def process_identity(pid: int) -> str:  # "pid start host"; the start (Linux's /proc) tells a reused pid apart
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        start = "ended" if stat[0] in ("Z", "X") else stat[19]  # a zombie has ended
    except (OSError, IndexError):
        start = "?"
    return f"{pid} {start} {socket.gethostname()}"


def running(holder: str) -> bool:  # the process a claim names still runs (on another host: assumed so)
    pid, start, host = (holder.split() + ["", "", ""])[:3]
    if host not in ("", socket.gethostname()):
        return True
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:  # another user's
        return True
    return process_identity(int(pid)).split()[1] in (start, "?")


def release_claims() -> None:  # this process's run.lock claims emptied: the runs are free again
    for run_dir in CLAIMED:
        with contextlib.suppress(OSError):
            if (run_dir / "run.lock").read_text().startswith(f"{os.getpid()} "):
                (run_dir / "run.lock").write_text("")
    CLAIMED.clear()


def lock_run_dirs(run: Run) -> Run:
    """Claim each run's run.lock (pid, start time, host) under a brief flock; a dead process's claim goes."""
    me = process_identity(os.getpid())
    for run_dir in run.dirs if is_main_process() else []:
        try:
            with open(run_dir / "run.lock", "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released as it closes
                lock.seek(0)
                holder = lock.read().strip()
                busy = f"--resume {run_dir}: process {holder.partition(' ')[0]} is training this run"
                require(holder in ("", me) or not running(holder), busy)
                lock.truncate(0)
                lock.write(f"{me}\n")
        except OSError as error:
            raise ArgsError(f"{run_dir}: cannot write to this run directory ({error.strerror})") from None
        CLAIMED.append(run_dir)
    return run


def make_run_dirs(runs: list[Run]) -> list[Run]:
    """A new directory per run with its args.json, all or none: {env}__{exp}__{seed}__{time}, then -1, ..."""
    args, second = runs[0].args, int(to_host(np.array([int(time.time())]))[0])  # process 0's time
    named = lambda stamp: [
        [Path(args.output_dir) / run_name(*r, stamp) for r in run.each_run()] for run in runs
    ]
    summary = lambda stamp: [sweep_dir(args, stamp)] if args.sweep else []
    stamps = (f"{second}-{n}" if n else f"{second}" for n in itertools.count())
    # process 0 alone writes; the first stamp free for every directory
    stamp = next(s for s in stamps if not is_main_process() or make_all(sum(named(s), summary(s))))
    runs = [run._replace(dirs=dirs) for run, dirs in zip(runs, named(stamp), strict=True)]
    for run in runs if is_main_process() else []:
        for config, seed, run_dir in zip(run.configs, run.seeds, run.dirs, strict=True):
            record = {**asdict(config), "script": SCRIPT, "run_seed": seed, "run_name": run_dir.name}
            record |= {"run_stamp": stamp, "sizes": run.algo.sizes._asdict()}
            write_atomic(run_dir / "args.json", json.dumps(record, indent=2).encode())
    return [lock_run_dirs(run) for run in runs]


def open_run_dirs(runs: list[Run]) -> list[Run]:
    """The runs with their directories, locked: new, or the resumed run's and its siblings' (by args.json)."""
    args = runs[0].args
    if args.resume is None:
        return make_run_dirs(runs)
    record, resumed = read_record(Path(args.resume)), Path(args.resume)
    name = functools.partial(run_name, stamp=record.get("run_stamp", "?"))  # older runs: one seed
    runs = [run._replace(dirs=[resumed.parent / name(*r) for r in run.each_run()]) for run in runs]
    for run in runs:  # the directory resumed by its path, in case it was renamed
        for i, (config, seed) in enumerate(run.each_run()):
            if label(config) == label(args) and seed == record["run_seed"]:
                run.dirs[i] = resumed
    missing = [str(d) for run in runs for d in run.dirs if not (d / "args.json").is_file()]
    require(not missing, f"--resume {args.resume}: its sibling runs' directories are missing: {missing}")
    return [lock_run_dirs(run) for run in runs]


def save_checkpoint(run_dir: Path, iterations_done: int, global_step: int, state_of_seed: Any) -> None:
    """checkpoints/step_{global_step}.msgpack, its CRC-32C last, written atomically; two are kept."""
    path = run_dir / "checkpoints" / f"step_{global_step:012d}.msgpack"
    path.parent.mkdir(exist_ok=True)
    payload = to_bytes({"iterations": iterations_done, "state": state_of_seed})
    write_atomic(path, payload + crc32c.crc32c(payload).to_bytes(4, "little"))
    for old in sorted(path.parent.glob("step_*.msgpack"))[:-2]:
        old.unlink()


def read_checkpoint(path: Path, template: Any) -> tuple[int, Any]:
    """(iterations done, the state of one seed); ValueError when the file does not read as one."""
    data = path.read_bytes()
    if crc32c.crc32c(data[:-4]).to_bytes(4, "little") != data[-4:]:
        raise ValueError(f"{path}: its checksum does not match (a corrupt or truncated file)")
    try:
        restored = from_bytes({"iterations": 0, "state": template}, data[:-4])
    except Exception as error:  # not a checkpoint of this program
        raise ValueError(f"{path}: {type(error).__name__}: {str(error).splitlines()[0]}") from error
    if jax.tree.map(np.shape, restored["state"]) != jax.tree.map(np.shape, template):
        raise ValueError(f"{path}: its arrays do not fit this run's state")
    return int(restored["iterations"]), restored["state"]


def restore_checkpoints(run: Run) -> tuple[int, list[Any] | None]:
    """(iterations done, every run's state) of the newest checkpoint that reads in every undiverged run's."""
    healthy = [d for d in run.dirs if not (d / "diverged.json").is_file()] or run.dirs
    names = sorted({p.name for d in healthy for p in (d / "checkpoints").glob("step_*.msgpack")})[::-1]
    if run.args.resume is None or not names:  # a run stopped before its first checkpoint starts again
        if run.args.resume and not all((d / "diverged.json").is_file() for d in run.dirs):
            say(f"{run.dirs[0]}: no checkpoint was written; the run starts over from step 0")
        return 0, None
    template, errors = jax.eval_shape(run.algo.init, jax.random.PRNGKey(0)), []
    for name in names:
        try:
            loaded = [read_checkpoint(d / "checkpoints" / name, template) for d in healthy]
            state = dict(zip(healthy, (state for _, state in loaded), strict=True))
            return loaded[0][0], [state.get(d, loaded[0][1]) for d in run.dirs]
        except (OSError, ValueError) as error:
            say(f"{error}: resuming from the checkpoint before it")
            errors.append(str(error))
    raise ArgsError(f"--resume {run.args.resume}: no checkpoint reads: {'; '.join(errors)}")


class RunLogger:  # one run directory's metrics: TensorBoard events, metrics.jsonl and, with --track, wandb
    def __init__(self, run_dir: Path, args: RunFlags, resume_step: int):
        self.jsonl, self.wandb_run = run_dir / "metrics.jsonl", None
        self.points: list[dict] = []  # every row of metrics.jsonl, as written (the plot's and eval.json's)
        if self.jsonl.exists():  # resumed: keep what was logged up to the checkpoint, rewritten atomically
            torn = 0
            for line in self.jsonl.read_text().splitlines(keepends=True):
                try:  # a line a full disk or a kill cut short is left out, and said
                    point = json.loads(line) if line.endswith("\n") else None
                    self.points += [point] if point["global_step"] <= resume_step else []
                except (ValueError, TypeError, KeyError):
                    torn += 1
            write_atomic(self.jsonl, "".join(json.dumps(point) + "\n" for point in self.points).encode())
            last = self.points[-1]["global_step"] if self.points else 0
            if torn or last < resume_step:
                rows = f"left out {torn} line(s) that did not read; its rows end at step {last:,}"
                say(f"{self.jsonl}: {rows}, the checkpoint at {resume_step:,}")
        # TensorBoard's event file, appended to at each write (no file held open) by the driver's writer
        self.events = run_dir / f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}"
        start = [Event(step=resume_step + 1, session_log=SessionLog(status="START"))] if resume_step else []
        self.append_events([Event(wall_time=time.time(), file_version="brain.Event:2"), *start])  # as TB's
        if args.track:  # the same wandb run after a resume, whatever the directory is called
            import wandb

            record = json.loads((run_dir / "args.json").read_text())
            where = {"project": args.wandb_project_name, "entity": args.wandb_entity, "dir": str(run_dir)}
            run = {"name": record["run_name"], "id": record["run_name"], "resume": "allow", "config": record}
            self.wandb_run = wandb.init(**where, **run, reinit="create_new")

    def append_events(self, events: list[Event]) -> None:  # TFRecords: length, data, each CRC-32C'd (masked)
        with open(self.events, "ab") as file:
            for data in (event.SerializeToString() for event in events):
                header = len(data).to_bytes(8, "little")
                file.write(header + masked_crc32c(header).to_bytes(4, "little") + data)
                file.write(masked_crc32c(data).to_bytes(4, "little"))

    def write(self, rows: list[tuple[int, dict[str, float]]]) -> None:  # (global_step, {tag: value}) each
        events = []
        with open(self.jsonl, "a") as jsonl:
            for step, values in rows:
                values = {tag: v for tag, v in values.items() if math.isfinite(v)}  # NaN: nothing to report
                if not values:
                    continue
                summary = Summary(value=[Summary.Value(tag=tag, simple_value=x) for tag, x in values.items()])
                events.append(Event(wall_time=time.time(), step=step, summary=summary))
                self.points.append({"global_step": step, **values})
                jsonl.write(json.dumps(self.points[-1]) + "\n")
                if self.wandb_run is not None:
                    self.wandb_run.log({**values, "global_step": step})
        self.append_events(events)

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


# --- 6. The compiled programs: init, a chunk of iterations, the evaluation ------------------------------
EVAL_SEED = 2**31 - 1  # the evaluation's PRNGKey(EVAL_SEED): the same for every seed and every point
RUNS_ONCE = 0  # init and the evaluation compile in about half the time at XLA level 0, and run in ms


def pad_seeds(tree: Any, slots: int) -> Any:  # leaves [R, ...] -> [slots, ...], the runs repeated
    return jax.tree.map(lambda x: np.take(x, np.arange(slots) % len(x), axis=0), tree)


def seed_slice(tree: Any, i: int) -> Any:  # leaves [R, ...] -> run i's
    return jax.tree.map(lambda x: x[i], tree)


def seeds_program(per_seed: Callable, inputs: tuple, level: int | None, axes=(0,), *, mesh=None, **jit):
    """jit(vmap(per_seed)) over the runs, split on the mesh's "seeds" axis; one run per device: unbatched."""
    slots = len(jax.tree.leaves(inputs[0])[0])
    row = lambda x, axis: x if axis is None else seed_slice(x, 0)  # a batched input's only row
    unbatched = lambda *xs: jax.tree.map(lambda leaf: leaf[None], per_seed(*map(row, xs, axes)))
    if slots == 1:
        program = unbatched
    elif mesh is not None and mesh.axis_names == ("seeds",) and mesh.size == slots:  # each device's own run
        specs = tuple(P() if axis is None else P("seeds") for axis in axes)
        # no collectives inside, so nothing to check (the check rejects a cond on a replicated operand)
        program = jax.shard_map(unbatched, mesh=mesh, in_specs=specs, out_specs=P("seeds"), check_vma=False)
    else:
        program = jax.vmap(per_seed, axes, spmd_axis_name="seeds")
    lowered = jax.jit(program, **jit).lower(*inputs)
    return lowered.compile(None if level is None else {"xla_backend_optimization_level": level})


def one_seed_at_a_time(init: Callable[[jax.Array], Any]) -> Callable[[jax.Array], Any]:
    """init(key), which under jax.vmap runs its keys one at a time (jax.lax.map), with the same bits:
    a batched orthogonal init is a batched QR, which can deadlock jaxlib 0.10's CPU thread pool."""
    init = jax.custom_batching.custom_vmap(init)

    @init.def_vmap
    def one_at_a_time(axis_size: int, in_batched: list[bool], keys: jax.Array) -> tuple[Any, Any]:
        params = jax.lax.map(init, keys)  # keys [S, ...]
        return params, jax.tree.map(lambda _: True, params)

    return init


class Conv3x3(nn.Module):  # nn.Conv(features, (3, 3), "VALID") as a dense layer on 3x3 patches: faster on CPU
    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:  # [..., H, W, C] -> [..., H-2, W-2, features]
        h, w = image.shape[-3:-1]
        patches = [image[..., i : i + h - 2, j : j + w - 2, :] for i in range(3) for j in range(3)]
        return nn.Dense(self.features, kernel_init=self.kernel_init)(jnp.concatenate(patches, axis=-1))


def initial_state(run: Run, restored: list[Any] | None) -> Any:
    """Every run's state, new (init(PRNGKey(seed)), its traced values) or restored, leaves [slots, ...]."""
    shardings = NamedSharding(run.mesh, P("seeds"))  # one for every leaf: split by run
    if run.algo.state_specs:  # the run axis, then each leaf's spec (from the state's shapes: init traced)
        specs = run.algo.state_specs(jax.eval_shape(run.algo.init, jax.random.PRNGKey(0)))
        seeds_first = lambda spec: NamedSharding(run.mesh, P("seeds", *spec))
        shardings = jax.tree.map(seeds_first, specs, is_leaf=lambda spec: isinstance(spec, P))
    stacked = lambda trees: pad_seeds(jax.tree.map(lambda *xs: np.stack(xs), *trees), run.slots)
    if restored is not None:
        return jax.device_put(stacked(restored), shardings)  # every process holds the same host arrays
    keys = pad_seeds(np.asarray(jax.vmap(jax.random.PRNGKey)(np.array(run.seeds, np.int32))), run.slots)
    inputs = (keys, stacked(map(hyperparameters, run.configs)))  # and each run's traced values
    # with strong types, as a restored state has them: a resume reruns the same program
    strong = lambda tree: jax.tree.map(lambda x: jnp.asarray(x, x.dtype), tree)
    init = lambda key, hyper: strong(run.algo.init(key)._replace(hyper=hyper))
    try:
        program = seeds_program(init, inputs, RUNS_ONCE, (0, 0), mesh=run.mesh, out_shardings=shardings)
        return jax.block_until_ready(program(*inputs))
    except jax.errors.JaxRuntimeError as error:  # an allocation the estimate let through
        raise ArgsError(f"the training state does not fit: {str(error).splitlines()[0]}") from None


def run_chunk(algo: Algorithm, per_chunk: int, state: Any, first: jax.Array) -> tuple[Any, dict]:
    """per_chunk iterations of one seed from iteration `first`, their logged metrics {tag: [per_chunk]}: those
    past the end skipped, NaN (first is not batched: a real branch); a suite's own read from its env_state."""

    def iterate(s: Any, index: jax.Array) -> tuple[Any, dict]:
        s, metrics = algo.iteration(s, index)
        logged = {tag: getattr(metrics, name) for name, tag in algo.metric_tags.items()}
        if algo.env.iteration_metrics:
            env_state, suite = algo.env.iteration_metrics(s.env_state, metrics.episodic_return)
            s, logged = s._replace(env_state=env_state), logged | suite
        return s, {tag: jnp.asarray(value, jnp.float32) for tag, value in logged.items()}

    skip = lambda s, index: (s, {tag: jnp.float32(jnp.nan) for tag in algo.logged_tags})
    maybe_iterate = lambda s, index: jax.lax.cond(index < algo.num_iterations, iterate, skip, s, index)
    return jax.lax.scan(maybe_iterate, state, first + jnp.arange(per_chunk))


class ChunkOutput(NamedTuple):  # one chunk of every run, as its compiled program returns it
    state: Any  # leaves [slots, ...]
    metrics: dict[str, jax.Array]  # each logged tag [slots, I] (NaN for the iterations past the end)
    finite: jax.Array  # [slots] bool: the model's parameters are all finite (checked on the device)


def compile_chunk(run: Run, state: Any) -> Callable[[Any, np.int32], ChunkOutput]:
    """jit(vmap(run_chunk)), compiled once for every chunk (its state not donated: slower on XLA CPU); it
    checks the parameters for non-finite values itself, so the state leaves the device only to be saved."""
    shardings = jax.tree.map(lambda x: x.sharding, state)
    replicated, by_seed = NamedSharding(run.mesh, P()), NamedSharding(run.mesh, P("seeds"))

    def per_seed(state: Any, first: jax.Array) -> ChunkOutput:
        state, metrics = run_chunk(run.algo, run.iterations_per_chunk, state, first)
        finite = jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(run.algo.model(state))]))
        return ChunkOutput(state, metrics, finite)

    start = time.perf_counter()
    jit = {"in_shardings": (shardings, replicated), "out_shardings": ChunkOutput(shardings, by_seed, by_seed)}
    level = run.algo.chunk_cpu_opt_level if jax.default_backend() == "cpu" else None
    compiled = seeds_program(per_seed, (state, np.int32(0)), level, (0, None), mesh=run.mesh, **jit)
    if (memory := compiled.memory_analysis()) is not None:  # XLA's count: the state, rollout, temporaries
        peak = memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
        host = sum(x.nbytes for x in jax.tree.leaves(state)) // run.mesh.size  # the host's copy (checkpoints)
        need = (peak + host) * run.mesh.size
        require_memory(run, need, "a chunk's arrays (the state, its rollout, ...)", True)
    steps = run.iterations_per_chunk * run.algo.env_steps_per_iteration
    where = f"{steps:,} env steps per seed, {run.how_many()} on {run.mesh.size} device(s)"
    say(f"compiled one chunk ({where}) in {time.perf_counter() - start:.1f}s")
    return compiled


class Evaluation(NamedTuple):  # E evaluation episodes: the carry of their scan, then its result
    env_state: Any  # [E]
    obs: jax.Array  # [E, *obs_shape]
    returns: jax.Array  # [E] the return of each episode
    lengths: jax.Array  # [E]
    running: jax.Array  # [E] bool: the episode has not ended yet
    key: jax.Array
    policy: Any  # act's carry (a recurrent policy's hidden state), or None
    info: jax.Array  # [E, K] what the env suite tells of each episode at its end (EnvStep.info; K is often 0)
    first_episode: Any = None  # gymnax EnvState [T]: episode 0's states, for the video (with record=T)


def evaluate_episodes(
    algo: Algorithm, num_episodes: int, model: Any, key: jax.Array, record: int = 0
) -> Evaluation:
    """num_episodes episodes in parallel with the deterministic policy algo.act, each to its end; with
    record=T, the same episodes' first T steps, episode 0's states kept (the video's)."""
    spec, (reset_key, key) = algo.env, jax.random.split(key)
    obs, env_state = reset_envs(spec, reset_key, num_episodes)
    zeros, policy = jnp.zeros(num_episodes), algo.act_init(model, num_episodes) if algo.act_init else None
    running, info = jnp.ones(num_episodes, bool), jnp.zeros((num_episodes, len(spec.info_names)))
    carry = Evaluation(env_state, obs, zeros, zeros.astype(jnp.int32), running, key, policy, info)

    def eval_step(c: Evaluation, _: Any = None) -> tuple[Evaluation, Any]:
        key, step_key = jax.random.split(c.key)
        action, policy = algo.act(model, c.obs, c.policy) if algo.act_init else (algo.act(model, c.obs), None)
        out = step_envs(spec, jax.random.split(step_key, num_episodes), c.env_state, action)
        ended = c.running & (out.terminated | out.truncated)
        returns, lengths = c.returns + out.reward * c.running, c.lengths + c.running
        info = c.info if out.info is None else jnp.where(ended[:, None], out.info, c.info)
        first_episode = seed_slice(spec.episodes(c.env_state) if spec.episodes else c.env_state, 0)
        c = Evaluation(out.state, out.obs, returns, lengths, c.running & ~ended, key, policy, info)
        return c, first_episode

    if record:
        carry, first_episode = jax.lax.scan(eval_step, carry, None, record)
        return carry._replace(first_episode=first_episode)
    # until every episode has ended (each does by its time limit, which may be 100,000 steps)
    return jax.lax.while_loop(lambda c: c.running.any(), lambda c: eval_step(c)[0], carry)


def compile_evaluate(run: Run, state: Any) -> Callable[[Any], Evaluation]:  # every run's, leaves [slots, ...]
    key = jax.random.PRNGKey(EVAL_SEED)
    evaluate = lambda s: evaluate_episodes(run.algo, run.args.eval_episodes, run.algo.model(s), key)
    return seeds_program(evaluate, (state,), RUNS_ONCE, mesh=run.mesh)


# --- 7. The driver: the chunks, and what is written out between them ----------------------------------
WRITES_BEHIND = 4  # chunks whose outputs may wait to be written; a checkpoint waits for all before it


def wait_for(tree: Any) -> Any:  # once computed; waiting in Python, not in XLA, lets a signal's handler run
    leaf = jax.tree.leaves(tree)[0]
    while not leaf.is_ready():
        time.sleep(0.001)
    return tree


class ChunkEnd(NamedTuple):  # where chunk `index` of a run ends, and whether an evaluation is due there
    first: int  # its first iteration
    num_valid: int  # I: its iterations that run (the last chunk's may be fewer)
    began: int  # the env steps per seed at its start
    step: int  # and at its end
    last: bool  # the run's last chunk
    evaluate: bool  # an evaluation point: the end, and the chunk ends past each --eval-frequency env steps


def chunk_end(run: Run, index: int) -> ChunkEnd:
    per_iteration, every = run.algo.env_steps_per_iteration, run.args.eval_frequency
    first = index * run.iterations_per_chunk
    num_valid = min(run.iterations_per_chunk, run.algo.num_iterations - first)
    began, step = first * per_iteration, (first + num_valid) * per_iteration
    last = index + 1 == run.num_chunks
    return ChunkEnd(first, num_valid, began, step, last, last or every > 0 and step // every > began // every)


def checkpoint_due(run: Run, end: ChunkEnd, saved: int) -> bool:  # saved: the env steps of the last one
    """At the first chunk end past each --checkpoint-frequency env steps (0: a tenth of the run)."""
    every = run.args.checkpoint_frequency or math.ceil(run.algo.total_steps / 10)
    return end.step // every > saved // every


def settle(writes: collections.deque, keep: int) -> None:
    """Wait until at most `keep` of the writer's jobs (oldest first) are unfinished; raise a job's error."""
    while writes and (len(writes) > keep or writes[0].done()):
        writes.popleft().result()


class ChunkRows(NamedTuple):  # what the writer needs of one chunk, on the host
    first: int  # the chunk's first iteration
    num_valid: int  # I: its iterations that ran
    metrics: dict[str, np.ndarray]  # tag -> [S, I]
    sps: float  # logged at the chunk's last step, with the evaluations
    evals: dict[str, np.ndarray]  # tag -> [S]
    step: int  # the env steps done at its end
    state: Any  # every run's state, leaves [slots, ...], where a checkpoint is due; else None
    diverged: dict[int, dict]  # run -> where its training stopped being finite (diverged.json), this chunk's
    skipped: set[int]  # the runs that diverged before this chunk: nothing more is written for them


def seed_points(run: Run, rows: ChunkRows, i: int) -> list[tuple[int, dict[str, float]]]:
    """Run i's points of one chunk, (global step, tag -> value); SPS and the evaluations on the last."""
    tags, per_iteration = run.algo.logged_tags, run.algo.env_steps_per_iteration
    points = [{tag: float(rows.metrics[tag][i, j]) for tag in tags} for j in range(rows.num_valid)]
    points[-1] |= {"charts/SPS": rows.sps} | {tag: float(x[i]) for tag, x in rows.evals.items()}
    return [((rows.first + j + 1) * per_iteration, point) for j, point in enumerate(points)]


def write_chunk(run: Run, loggers: list[RunLogger], rows: ChunkRows, line: str) -> None:
    """Each run's rows (TensorBoard, metrics.jsonl), its checkpoint (or where it diverged), then the line."""
    for i, logger in enumerate(loggers):
        if i in rows.skipped:
            continue
        logger.write(seed_points(run, rows, i))
        if i in rows.diverged:
            write_atomic(run.dirs[i] / "diverged.json", json.dumps(rows.diverged[i], indent=2).encode())
        elif rows.state is not None:
            save_checkpoint(run.dirs[i], rows.first + rows.num_valid, rows.step, seed_slice(rows.state, i))
    say(line)


def divergence(run: Run, end: ChunkEnd, metrics: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    """Where run i's training turned non-finite: the first loss non-finite for good (else its parameters)."""
    turned = {}  # a loss -> the first iteration from which it stays non-finite
    for tag, x in metrics.items():
        bad = ~np.isfinite(x[i])
        if tag.startswith("losses/") and bad[-1]:
            turned[tag] = len(bad) - int(np.argmin(bad[::-1])) if not bad.all() else 0
    tag = min(turned, key=turned.get, default="parameters")
    step = (end.first + turned.get(tag, end.num_valid - 1) + 1) * run.algo.env_steps_per_iteration
    return {"non_finite": tag, "at_step": step, "chunk": [end.began, end.step], "run_dir": run.dirs[i].name}


def progress_line(run: Run, end: ChunkEnd, metrics: dict, evals: dict, elapsed: float, at_start: int) -> str:
    """[####----] steps | SPS | the training return of the chunk's last quarter (and evaluations) | time."""
    recent = metrics["charts/episodic_return"][:, -max(1, end.num_valid // 4) :]  # [S, I/4]
    latest = np.nanmean(recent) if np.isfinite(recent).any() else np.nan
    bar, sps = "#" * int(20 * end.step / run.algo.total_steps), (end.step - at_start) / elapsed
    steps = f"{end.step:>10,}/{run.algo.total_steps:,} steps"
    line = f"[{bar:-<20}] {steps} | {sps:,.0f} SPS | return {latest:8.2f}"
    return line + "".join(f" | eval {np.mean(x):.2f}" for x in evals.values()) + f" | {elapsed:6.1f}s"


def resume_command(run: Run) -> str:
    return f"python {sys.argv[0]} --resume {run.dirs[0]}"


def newly_diverged(run: Run, end: ChunkEnd, finite: np.ndarray, metrics: dict, diverged: dict) -> dict:
    """The runs whose parameters turned non-finite in this chunk (finite [R]: they are not), each said."""
    new = {i: divergence(run, end, metrics, i) for i, ok in enumerate(finite) if not ok and i not in diverged}
    go_on = ", others go on" if len(run.seeds) > len(diverged) + len(new) else ""  # where some still train
    for d in new.values():
        where = f"{d['non_finite']} turned non-finite at step {d['at_step']:,}"
        say(f"{d['run_dir']}: {where}; it trains no further (its checkpoints stay){go_on}")
    return new


def state_to_host(run: Run, end: ChunkEnd, saved: int, writes: collections.deque, state: Any, ends: bool):
    """(the state on the host where a checkpoint is due, after the earlier writes: one copy; its step)"""
    if not (ends or checkpoint_due(run, end, saved)):
        return None, saved
    settle(writes, keep=0)
    return to_host(state), end.step


def exit_if_stopped(run: Run, end: ChunkEnd, failed: BaseException | None, stopped: bool, stop: list):
    """Once the chunk is written: exit 1 where the evaluation failed to compile, 128 + a signal's number."""
    if failed is not None:  # this chunk's logs and checkpoint are written: a resume goes on from them
        detail = f"{type(failed).__name__}: {(str(failed).strip().splitlines() or [''])[0]}"
        sys.exit(f"error: the evaluation does not compile ({detail}); stopped at step {end.step:,}")
    if stopped:
        say(f"stopped at step {end.step:,}; checkpoint saved. Continue with: {resume_command(run)}")
        sys.exit(128 + (stop[0] if stop else signal.SIGTERM))


def train_chunks(run: Run, chunk: Callable, evaluate: Future, state: Any, done: int, stop: list) -> tuple:
    """The chunks from iteration `done`: as chunk k ends, chunk k+1 is dispatched and chunk k's results go to
    a writer thread; it never exits while a chunk computes (Python's teardown under it can crash). Transfers
    stay in this thread: with several processes each is a collective."""
    per_iteration, num_runs = run.algo.env_steps_per_iteration, len(run.seeds)
    at_start = reached = done * per_iteration
    loggers = [RunLogger(d, run.args, at_start) for d in run.dirs] if is_main_process() else []
    writer, writes = ThreadPoolExecutor(max_workers=1), collections.deque()  # the writes not yet waited for
    start = ready = time.perf_counter()
    in_flight = chunk(state, np.int32(done))  # done ends a chunk
    evaluation, saved = None, at_start  # the latest evaluation; the env steps of the latest checkpoint
    # run -> where it diverged (its diverged.json, on a resume): it trains on in its slot, nothing written
    diverged = records(run.dirs, "diverged.json")
    try:
        for index in range(math.ceil(done / run.iterations_per_chunk), run.num_chunks):
            output, end = wait_for(in_flight), chunk_end(run, index)
            state, failed = output.state, evaluate.exception() if end.evaluate or evaluate.done() else None
            if end.evaluate and failed is None:  # dispatched before the next chunk: it waits for it alone
                evaluation = evaluate.result()(state)
            stopping = to_host(np.array([len(stop)])).any() and not end.last  # a signal to any process
            if not end.last and not stopping:  # before this chunk's results come to the host: no device idles
                in_flight = chunk(state, np.int32(end.first + run.iterations_per_chunk))
            # [S, I]: the real runs (not the padding), the iterations that ran
            metrics = {tag: x[:num_runs, : end.num_valid] for tag, x in to_host(output.metrics).items()}
            new = newly_diverged(run, end, to_host(output.finite)[:num_runs], metrics, diverged)
            skipped, diverged = set(diverged), diverged | new
            stopping |= len(diverged) == num_runs and not end.last  # all diverged: drop the chunk in flight
            now, reached = time.perf_counter(), end.step
            sps, ready, evals = end.num_valid * per_iteration / (now - ready), now, {}  # evals: tag -> [S]
            if end.evaluate and failed is None:  # every run's mean return, of its episodes [S, E]
                evals["eval/episodic_return"] = to_host(evaluation.returns)[:num_runs].mean(-1, np.float64)
            ends_run = end.last or stopping or failed is not None
            on_host, saved = state_to_host(run, end, saved, writes, state, ends_run)
            line = progress_line(run, end, metrics, evals, time.perf_counter() - start, at_start)
            rows = ChunkRows(end.first, end.num_valid, metrics, sps, evals, end.step, on_host, new, skipped)
            writes.append(writer.submit(write_chunk, run, loggers, rows, line))
            settle(writes, keep=0 if ends_run else WRITES_BEHIND)  # a write's error is raised here
            exit_if_stopped(run, end, failed, stopping and len(diverged) < num_runs, stop)
            if len(diverged) == num_runs:
                break
    except BaseException:
        writer.shutdown(wait=True, cancel_futures=True)  # the writes before the error finish
        for logger in loggers:
            logger.close()
        wait_for(in_flight)
        raise
    writer.shutdown()
    wait_for(in_flight)  # a chunk dispatched before every run was seen to diverge
    steps, took, per = reached - at_start, time.perf_counter() - start, "run" if run.args.sweep else "seed"
    say(f"trained {steps:,} steps x {run.how_many()} in {took:.2f}s ({steps / took:,.0f} SPS per {per})")
    return state, loggers, evaluation, diverged


# --- 8. Evaluation and the outputs of a finished run -----------------------------------------------------
def eval_summary(returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    returns = np.asarray(returns, np.float64)
    stats = {"mean": float(returns.mean()), "std": float(returns.std()), "episodes": len(returns)}
    return {"returns": returns.tolist(), "lengths": np.asarray(lengths).tolist(), **stats}


def plot_returns(run_dir: Path, title: str, points: list[dict]) -> None:  # episodic_return.png
    from matplotlib.figure import Figure  # drawn straight to a file: no pyplot, no backend to choose

    ax = (fig := Figure(figsize=(6, 4), layout="tight")).subplots()
    for tag in ("charts/episodic_return", "eval/episodic_return"):
        curve = [(p["global_step"], p[tag]) for p in points if tag in p]
        marker = "o" if tag.startswith("eval") else None  # evaluations are few: each one shows
        ax.plot(*zip(*curve, strict=True), label=tag.replace("charts", "training"), marker=marker)
    ax.set(xlabel="environment steps", ylabel="episodic return", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(run_dir / "episodic_return.png", dpi=100)


def write_outputs(run: Run, state: Any, first_lengths: np.ndarray, diverged: Any = ()) -> None:
    """--save-model's {exp_name}.flax and --capture-video's video of the final state in each run's directory
    but a diverged one's; first_lengths [R]: each run's evaluation episode 0's length (the video's)."""
    algo, args = run.algo, run.args
    written = [(i, d) for i, d in enumerate(run.dirs if is_main_process() else []) if i not in diverged]
    if args.save_model:
        models = to_host(jax.vmap(algo.model)(state))
        for i, run_dir in written:
            write_atomic(run_dir / f"{args.exp_name}.flax", to_bytes(seed_slice(models, i)))
    if args.capture_video:  # episode 0 again, its states kept: as long as the longest seed's
        key, T = jax.random.PRNGKey(EVAL_SEED), int(np.max(first_lengths))
        record = lambda s: evaluate_episodes(algo, args.eval_episodes, algo.model(s), key, T).first_episode
        videos = to_host(seeds_program(record, (state,), RUNS_ONCE, mesh=run.mesh)(state))
        for i, run_dir in written:
            (run_dir / "videos").mkdir(exist_ok=True)
            algo.env.render(seed_slice(videos, i), int(first_lengths[i]), run_dir / "videos")


def finish_run(run: Run, state: Any, loggers: list[RunLogger], evaluation: Evaluation, diverged: dict):
    """Each run's eval.json and plot from the evaluation at the training's end, then the model and video."""
    algo, args, result = run.algo, run.args, to_host(evaluation)
    for i, logger in enumerate(loggers):  # process 0's
        logger.close()
        if i in diverged:
            continue
        summary = {**eval_summary(result.returns[i], result.lengths[i]), "global_step": algo.total_steps}
        if algo.env.summary:  # the env suite's own (a score, each achievement's rate, ...)
            summary |= algo.env.summary(result.returns[i], result.info[i])
        point = lambda p: {"global_step": p["global_step"], "mean": p["eval/episodic_return"]}
        summary["eval_curve"] = [point(p) for p in logger.points if "eval/episodic_return" in p]
        write_atomic(run.dirs[i] / "eval.json", json.dumps(summary, indent=2).encode())
        which = f"{label(run.configs[i]) + ', ' * bool(args.sweep)}seed {run.seeds[i]}"
        plot_returns(run.dirs[i], f"{algo.name} on {args.env_id}, {which}", logger.points)
        mean, std = summary["mean"], summary["std"]
        print(f"{run.dirs[i]}: eval return {mean:.2f} +- {std:.2f} over {args.eval_episodes} episodes")
    write_outputs(run, state, result.lengths[:, 0], diverged)


def evaluate_saved_model(flags: type, run_dir: Path | str, episodes: int = 0, seed: int = EVAL_SEED) -> dict:
    """{run_dir}/{exp_name}.flax evaluated as eval.json was (to the bit for one seed: the same program), with
    the script's Flags: e.g. script.evaluate_saved_model(script.Flags, run_dir)["mean"]."""
    args = args_from_record(flags, read_record(Path(run_dir)), Path(run_dir))
    algo = type(args).make_algorithm(args)
    template = algo.model(jax.eval_shape(algo.init, jax.random.PRNGKey(0)))
    model = from_bytes(template, (Path(run_dir) / f"{args.exp_name}.flax").read_bytes())
    key, models = jax.random.PRNGKey(seed), jax.tree.map(lambda x: np.asarray(x)[None], model)  # one seed's
    evaluate = lambda m: evaluate_episodes(algo, episodes or args.eval_episodes, m, key)
    result = seed_slice(seeds_program(evaluate, (models,), RUNS_ONCE)(models), 0)
    return eval_summary(result.returns, result.lengths)


# --- 9. Sweeps: each configuration's seeds summed up, and the configurations ranked ---------------------
def iqm(scores: np.ndarray) -> float:  # the interquartile mean: floor(n / 4) dropped at each end
    x = np.sort(np.asarray(scores, np.float64))
    return float(x[len(x) // 4 : len(x) - len(x) // 4].mean())


def bootstrap(scores: np.ndarray, statistic: Callable = iqm, reps: int = 2000) -> tuple[Any, Any]:
    """The 95% percentile bootstrap interval of statistic(scores) (each of its values), the seeds (scores'
    first axis) resampled with replacement."""
    x = np.asarray(scores, np.float64)
    samples = x[np.random.default_rng(0).integers(0, len(x), (reps, len(x)))]  # [reps, S, ...]
    return tuple(np.percentile([statistic(sample) for sample in samples], [2.5, 97.5], axis=0).tolist())


def command_line(config: RunFlags, seed: int) -> str:
    """The command that trains config alone, from seed: its flags that differ from the defaults."""
    defaults, parts = type(config)(), [f"python {sys.argv[0]}", f"--env-id {config.env_id}"]
    left_out = {"env_id", "sweep", "resume", "seed", "output_dir"} | config.machine_flags
    for name in (f.name for f in fields(config) if f.name not in left_out):
        value, flag = getattr(config, name), f"--{name.replace('_', '-')}"
        if value != getattr(defaults, name) and value is not None:
            parts.append(flag.replace("--", "--no-", not value) if type(value) is bool else f"{flag} {value}")
    return shlex.join(parts[:1]).strip("'") + " " + " ".join(parts[1:] + [f"--seed {seed}"])


def configuration_results(run: Run, first: int) -> dict[str, Any]:
    """The configuration whose seeds are runs first, first + 1, ...: its final evaluations and curves."""
    args, seeds = run.args, run.args.num_seeds
    config, all_dirs = run.configs[first], run.dirs[first : first + seeds]
    ended = records(all_dirs, "eval.json")  # the seeds that trained to the end
    dirs, finals = [all_dirs[i] for i in ended], np.array([e["mean"] for e in ended.values()])  # finals [S]
    tag = "eval/episodic_return" if args.eval_frequency else "charts/episodic_return"
    logged = [map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) for d in dirs]
    curves = [np.array([(p["global_step"], p[tag]) for p in ps if tag in p]) for ps in logged]  # [S][P, 2]
    values = {name: getattr(config, name) for name in swept(config)}
    diverged = list(records(all_dirs, "diverged.json").values())
    results = {"config": label(config), "values": values, "iqm": iqm(finals) if dirs else None}
    results |= {"ci95": bootstrap(finals) if dirs else None, "diverged": diverged}
    results["final_returns"] = finals.tolist()
    if args.eval_frequency:  # the mean return while training: the evaluation curve's area per env step
        span = lambda c: c[-1, 0] - c[0, 0]
        area = [np.trapezoid(c[:, 1], c[:, 0]) / span(c) if span(c) else c[0, 1] for c in curves if len(c)]
        results["eval_curve_area"] = float(np.mean(area))
    command = command_line(config, args.seed + seeds)  # the next seeds: fresh ones
    return results | {"command": command, "run_dirs": [d.name for d in all_dirs], "curves": curves}


def plot_sweep(path: Path, title: str, rows: list[dict], evaluation: bool) -> None:
    """Each configuration's curve: the mean over its seeds, and a 95% bootstrap band of that mean."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    ax = (fig := Figure(figsize=(7, 4.5))).subplots()
    palette = colormaps["tab10" if len(rows) <= 10 else "tab20"].colors  # a colour per configuration
    for row, color in zip(rows, palette * len(rows), strict=False):
        if not (points := [c for c in row["curves"] if len(c)]):
            continue
        grid = np.linspace(max(c[0, 0] for c in points), min(c[-1, 0] for c in points), 100)
        ys = np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in points])  # [S, 100]
        ax.plot(grid, ys.mean(0), color=color, label=row["config"])
        ax.fill_between(grid, *bootstrap(ys, lambda s: s.mean(0), 500), color=color, alpha=0.2)
    what = "evaluation" if evaluation else "training"
    ax.set(xlabel="environment steps", ylabel=f"{what} return (mean, 95% band)", title=title)
    ax.grid(alpha=0.3)
    # the legend beside the curves (a grid has many rows), and the saved box grown to hold it
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, dpi=100, bbox_inches="tight")


def write_sweep_summary(runs: list[Run]) -> None:
    """sweep.json, sweep.md, sweep.png: the configurations ranked by IQM, the winner's command (new seeds)."""
    args, folder = runs[0].args, runs[0].summary_dir
    folder.mkdir(parents=True, exist_ok=True)  # a sweep resumed after its directory was removed
    every = range(0, len(runs[0].configs), args.num_seeds)
    rows = [configuration_results(run, first) for run in runs for first in every]
    # a tie goes to the surer; a configuration with a diverged seed comes last
    surest = lambda r: (bool(r["diverged"]), -r["iqm"], -r["ci95"][0], -r.get("eval_curve_area", 0))
    rows.sort(key=lambda r: surest(r) if r["iqm"] is not None else (True, math.inf))
    seeds = f"{args.seed}..{args.seed + args.num_seeds - 1}"
    warning = f"The winner is picked on seeds {seeds}: re-evaluate it on fresh seeds before reporting it"
    order = "the IQM over seeds of the final deterministic evaluation's mean return (95% bootstrap CI); a tie"
    order += " goes to the higher lower end of the interval; a configuration with a diverged seed comes last"
    summary = {"env_id": args.env_id, "script": SCRIPT, "sweep": list(args.sweep), "seeds": args.num_seeds}
    summary |= {"ranked_by": order, "winner": rows[0]["command"], "warning": warning}
    configs = [{k: v for k, v in row.items() if k != "curves"} for row in rows]
    write_atomic(folder / "sweep.json", json.dumps(summary | {"configs": configs}, indent=2).encode())
    area = args.eval_frequency > 0
    header = "| rank | configuration | IQM | 95% CI |" + " eval curve area |" * area
    table = [header + " seeds' final returns |", "|---" * (5 + area) + "|"]
    for rank, row in enumerate(rows, 1):
        marks = ["diverged: {run_dir}, {non_finite} at step {at_step:,}".format(**d) for d in row["diverged"]]
        iqm_cell = "-" if row["iqm"] is None else f"{row['iqm']:.2f}"
        interval = "-" if row["ci95"] is None else "[{:.2f}, {:.2f}]".format(*row["ci95"])
        cells = [rank, "; ".join([row["config"], *marks]), iqm_cell, interval]
        returns = ", ".join(f"{x:.1f}" for x in row["final_returns"])
        cells += [f"{row['eval_curve_area']:.2f}", returns] if area else [returns]
        table.append("| " + " | ".join(map(str, cells)) + " |")
    title = f"# Sweep: {SCRIPT} on {args.env_id}, {args.num_seeds} seed(s) per configuration"
    winner = f"Winner: `{rows[0]['command']}`\n\n{warning}: the command above trains it on the next seeds.\n"
    text = "\n".join([title, "", f"Ranked by {order}.", "", *table, "", winner])
    write_atomic(folder / "sweep.md", text.encode())
    plot_sweep(folder / "sweep.png", f"{SCRIPT} on {args.env_id}", rows, area)
    print(f"{text}\nwritten to {folder}/: sweep.json, sweep.md, sweep.png")


# --- 10. main: a run's life, top to bottom -----------------------------------------------------------------
def chunks_wait_for_thread() -> bool:  # on an accelerator the thread's work is done before the chunks
    return jax.default_backend() != "cpu"


def train_and_finish(run: Run, state: Any, done: int, stop: list[int]) -> dict[int, dict]:
    """One program's chunks, then its runs' outputs; where its runs diverged. The evaluation compiles in a
    thread beside the chunk's compile (XLA compiles on one core); matplotlib loads there once the chunk has
    compiled (an import beside its tracing takes the GIL from it). On an accelerator the chunks wait for both:
    a compile, or an import holding the GIL, beside chunks of milliseconds delays every next dispatch."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        evaluate = pool.submit(compile_evaluate, run, state)
        chunk = compile_chunk(run, state)
        plotting = pool.submit(importlib.import_module, "matplotlib.figure")  # for the plot at the end
        if chunks_wait_for_thread():
            futures.wait([evaluate, plotting])
        state, loggers, evaluation, diverged = train_chunks(run, chunk, evaluate, state, done, stop)
    if len(diverged) < len(run.seeds):
        finish_run(run, state, loggers, evaluation, diverged)
    return diverged


def finished(run: Run, restored: list[Any]) -> dict[int, dict]:
    """A finished run resumed: nothing trains; the model and the video are written if asked for."""
    done = records(run.dirs, "eval.json")  # run i -> its eval.json
    diverged = {i: d for i, d in records(run.dirs, "diverged.json").items() if i not in done}
    for i, run_dir in enumerate(run.dirs):
        ended = "diverged at step {at_step:,} ({non_finite})".format(**diverged[i]) if i in diverged else ""
        ended = ended or f"finished at step {run.algo.total_steps:,}, eval return {done[i]['mean']:.2f}"
        say(f"{run_dir}: {ended}; nothing to train")
    if (run.args.save_model or run.args.capture_video) and done:
        lengths = np.array([done[i]["lengths"][0] if i in done else 1 for i in range(len(run.dirs))])
        write_outputs(run, initial_state(run, restored), lengths, diverged)
    return diverged


def train_all(runs: list[Run], stop: list[int]) -> None:
    """Each program in turn from its newest checkpoints, a sweep's summary; exit 1 if every run diverged."""
    diverged, trained = [], False
    for number, run in enumerate(runs):
        if number and stop:  # the next program of a sweep
            say(f"stopped; checkpoints saved. Continue with: {resume_command(run)}")
            sys.exit(128 + stop[0])
        done, restored = restore_checkpoints(run)
        evaluated = [(d / "eval.json").is_file() for d in run.dirs]
        ended = [e or (d / "diverged.json").is_file() for e, d in zip(evaluated, run.dirs, strict=True)]
        if all(ended) and (done == run.algo.num_iterations or not any(evaluated)):
            diverged += finished(run, restored).values()
        else:
            diverged += train_and_finish(run, initial_state(run, restored), done, stop).values()
            trained = True
    if runs[0].args.sweep and is_main_process():
        summary = runs[0].summary_dir / "sweep.md"
        say(
            f"the sweep is finished: {summary}"
        ) if not trained and summary.is_file() else write_sweep_summary(runs)
    named = "; ".join(f"{d['run_dir']} ({d['non_finite']} at step {d['at_step']:,})" for d in diverged)
    if len(diverged) == sum(len(run.seeds) for run in runs):
        every = f"non-finite loss or parameters in every run: {named}"
        sys.exit(f"error: {every}; their last good checkpoints stay")
    if diverged:
        say(f"diverged, and trained no further: {named}")


def forget_unstarted(runs: list[Run]) -> bool:
    """Remove the new run directories of a start that failed before any checkpoint; True if it did."""
    if not runs or runs[0].args.resume is not None:
        return False
    dirs = [d for run in runs for d in run.dirs]
    if any((d / "checkpoints").exists() for d in dirs):
        return False
    for run_dir in dirs + [runs[0].summary_dir]:
        shutil.rmtree(run_dir, ignore_errors=True)
    return True


def failure(error: Exception, runs: list[Run]) -> str:
    """The line a run that failed while writing (a full disk) or running (out of memory) exits with."""
    memory = isinstance(error, jax.errors.JaxRuntimeError) and "RESOURCE_EXHAUSTED" in str(error)
    if not memory and not isinstance(error, OSError):
        raise error
    what = f"out of memory ({sizing_flags(runs[0], True)})" if memory else error.strerror or str(error)
    what += f": {error.filename}" if getattr(error, "filename", None) else ""
    if forget_unstarted(runs) or not runs:
        return f"error: {what}; nothing was saved"
    return f"error: {what}; the last checkpoint is kept; continue with: {resume_command(runs[0])}"


def main(flags: type[RunFlags]) -> None:  # train every run (a configuration x a seed), evaluate, write out
    gc.freeze()  # Python's collector skips the imports' objects, while JAX traces and at exit
    atexit.register(gc.freeze)
    stop: list[int] = []  # Ctrl-C / SIGTERM: the chunk in flight finishes and is checkpointed, then exit
    runs: list[Run] = []  # once their directories exist

    def remember(signum: int, _frame: Any) -> None:
        if stop:  # a second signal quits at once: every checkpoint written is whole (renamed into place)
            saved = any(any((d / "checkpoints").glob("step_*.msgpack")) for run in runs for d in run.dirs)
            hint = f"; continue from the last checkpoint with: {resume_command(runs[0])}" if saved else ""
            hint = hint or "; no checkpoint was written: a --resume starts over" * bool(runs)
            print(f"\nreceived signal {signum} again: quitting now{hint}", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        stop.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing", flush=True)

    previous = {s: signal.signal(s, remember) for s in (signal.SIGINT, signal.SIGTERM)}
    try:  # every bad input is reported here, in one line, before anything compiles
        start_jax(args := resume_args(parse_flags(flags)))
        planned = plan_runs(args)  # one per program: a sweep's static flags make several
        if args.resume is None:
            say_plan(planned[0])
        runs += open_run_dirs(planned)
        train_all(runs, stop)
    except ArgsError as error:
        forget_unstarted(runs)
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except (OSError, jax.errors.JaxRuntimeError) as error:  # a full disk, out of memory, ...
        sys.exit(failure(error, runs))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        release_claims()  # the run directories are free again (main() called from Python)


# ===== What the algorithm above hands the harness: every flag of a run (Args', then RunFlags), carrying
# Args, Hyperparameters and make_algorithm, which is all the harness reads of the script (docs/harness.md)
Flags = flags_class(Args, Hyperparameters, make_algorithm)

if __name__ == "__main__":
    main(Flags)
