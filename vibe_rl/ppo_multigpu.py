# Copyright (c) 2026 the vibe_rl authors. SPDX-License-Identifier: MIT (the text: vibe_rl's LICENSE file)
"""PPO over a mesh of devices with GSPMD: one seed's environments split over several devices,
on one machine or several.

Algorithm: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347),
with the 13 core implementation details of Huang et al. 2022, "The 37 Implementation Details
of Proximal Policy Optimization" (ICLR blog track), tagged `# [PPO-1]` to `# [PPO-13]`, and
those of continuous actions and time limits, `[PPO-14]` to `[PPO-18]`, numbered as in
docs/ppo_jax_scan.md. It is the PPO of ppo_jax_scan.py (its MLP: no --network cnn), written as
single-device code over the global batch of N = num_envs envs; docs/ppo_multigpu.md explains
the mesh.

The devices form a 2-D mesh with the axes ("seeds", "data"). One seed's env batch (env
states, observations, the rollout, advantages) is split along "data", L = N / D envs per
device (D = --data-devices, or every device when it is 0); the seeds are split along "seeds".
Parameters and optimizer state are replicated, or split too with --fsdp. jit's partitioner
compiles one program per device and inserts the collectives: one all-reduce of the gradient
per minibatch step. No pmap, no hand-written psum. Minibatches never leave their device
(shuffle_into_minibatches), and nothing random depends on D: a seed trains the same on any
number of devices.

Run `python vibe_rl/ppo_multigpu.py --env-id CartPole-v1 --num-envs 8`; on several machines,
the same command with --distributed on each (jax.distributed.initialize). It writes
runs/{env_id}__{exp_name}__{seed}__{unix_time}/: args.json, TensorBoard events, metrics.jsonl,
checkpoints/, eval.json, episodic_return.png; {exp_name}.flax with --save-model,
videos/eval.gif with --capture-video. --resume RUN_DIR continues a run exactly. Process 0
writes the checkpoints and every process reads them: a filesystem all processes see.

How to read this file:
    1-3  Args (PPO's flags, then the mesh's), the networks, the state (a shape on every field).
    4    the math as small pure functions: compute_gae, policy_loss_fn, value_loss_fn; then
         what the mesh needs: shuffle_into_minibatches (minibatches that stay on their
         device), normalize_advantages, fsdp_spec.
    5    training. `iteration` is one PPO iteration: `rollout` (num_steps steps of num_envs
         envs), GAE, then update_epochs of `sgd_epoch` over device-local minibatches.
         `build_setup` joins the processes (start_distributed), checks the flags and builds
         the mesh; `state_specs` lays the state out on it; `make_train(args)` returns the
         whole training as one pure function train(key).
    6    the evaluation policy, and `make_algorithm`: PPO on the mesh as the run harness sees it.
    Shape letters, the same in every vibe_rl script: T steps of a rollout, N envs (of one seed,
    over all its devices), D devices that share them, L = N / D envs per device, G envs in a
    group that shuffles together, M minibatches, B a minibatch (T*N / M samples), A actions (the
    number of discrete ones, or the dimensions of a continuous one), E evaluation episodes, S
    seeds; obs_dim is named.
    The algorithm calls a few helpers of the run harness (below the banner): make_env (it
    returns an EnvSpec, a gymnax or Brax env and its spaces), reset_envs and step_envs (gymnax's
    reset and step for N envs), one_seed_at_a_time (the init under vmap), require and
    require_positive (a flag's check); and jax.sharding's AxisType, Mesh, NamedSharding and P,
    which the harness imports. The rest of the harness is the machinery every vibe_rl script
    shares, word for word (run directories, logging, checkpoints, resume). Stop reading there.
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
from typing import Any, ClassVar, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal

# ===== 1. Arguments ==================================================================


@dataclass
class Args:
    # PPO (CleanRL ppo.py's defaults: they solve CartPole-v1)
    env_id: str = "CartPole-v1"
    """the id of the environment: a gymnax id, brax/<name> (Brax MuJoCo), craftax/<name> (Craftax,
    symbolic) or playground/<Task> (DeepMind Control Suite, MuJoCo Playground)"""
    total_timesteps: int = 500_000
    """total environment steps of the training, per seed (rounded down to whole iterations)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer [traced]"""
    num_envs: int = 4
    """the number of parallel environments (of one seed, over all its devices)"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """linearly anneal the learning rate to 0 over the training"""
    gamma: float = 0.99
    """the discount factor gamma [traced]"""
    gae_lambda: float = 0.95
    """the lambda of generalized advantage estimation [traced]"""
    num_minibatches: int = 4
    """the number of minibatches per epoch"""
    update_epochs: int = 4
    """the number of epochs over the rollout per iteration"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient (> 0; the value loss is clipped by it too) [traced]"""
    clip_vloss: bool = True
    """clip the value loss around the old values"""
    ent_coef: float = 0.01
    """coefficient of the entropy bonus (>= 0) [traced]"""
    vf_coef: float = 0.5
    """coefficient of the value loss (>= 0) [traced]"""
    max_grad_norm: float = 0.5
    """the maximum global norm of the gradient (> 0) [traced]"""
    target_kl: float | None = None
    """skip the remaining epochs of an iteration once approx_kl exceeds this (>= 0; unset: no early stop)"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of the critic"""
    normalize_obs: bool = False
    """normalise observations by running mean and std (clipped to +-10)"""
    normalize_reward: bool = False
    """scale rewards by the running std of the discounted return (clipped to +-10)"""

    # The mesh, and several processes
    data_devices: int = 0
    """devices that share one seed's envs (the mesh's "data" axis), the rest split the seeds; 0: as many as
    divide both the device count and --num-envs (all of them when they divide --num-envs)"""
    shuffle_group_envs: int = 0
    """envs shuffled together into minibatches (divides the envs per device); 0: the smallest that fits"""
    fsdp: bool = False
    """split parameters and optimizer state along the "data" axis too (else replicated)"""
    distributed: bool = False
    """several processes (machines): join them with jax.distributed.initialize"""
    coordinator_address: str | None = None
    """with --distributed: host:port of process 0 (omit all three to auto-detect, e.g. SLURM)"""
    num_processes: int | None = None
    """with --distributed: the number of processes"""
    process_id: int | None = None
    """with --distributed: the index of this process, 0 .. num_processes-1"""
    # Which of these flags are the machine's, not the training's: args.json keeps them, a resume never
    # reads them back. --fsdp lays the same training out otherwise, so a resume may change it.
    machine_flags: ClassVar = ("data_devices", "distributed", "coordinator_address", "num_processes",
        "process_id")  # fmt: skip
    resume_may_change: ClassVar = ("fsdp",)


# ===== 2. Networks ===================================================================


def dense(width: int, gain: float) -> nn.Dense:
    """[PPO-2] orthogonal initialisation with the given gain, zero bias."""
    return nn.Dense(width, kernel_init=orthogonal(gain), bias_init=constant(0.0))


def torso(obs: jax.Array, width: int) -> jax.Array:
    """[..., obs_dim] -> features [..., width]: two tanh layers, gains sqrt(2)."""
    return nn.tanh(dense(width, np.sqrt(2))(nn.tanh(dense(width, np.sqrt(2))(obs))))


class Actor(nn.Module):
    """obs [..., obs_dim] -> the policy pi(.|obs), a distrax distribution. [PPO-13] separate actor
    and critic networks: this is the actor's own."""

    spec: EnvSpec
    hidden_size: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> distrax.Distribution:
        x = torso(obs, self.hidden_size)
        out = dense(self.spec.action_dim, 0.01)(x)  # [PPO-2] gain 0.01: a near uniform / zero-mean policy
        if self.spec.discrete:
            return distrax.Categorical(logits=out)  # out [..., A] are the logits
        # [PPO-14] state-independent log-std, a free parameter initialised to 0 (std 1)
        log_std = self.param("log_std", constant(0.0), (self.spec.action_dim,))
        return distrax.MultivariateNormalDiag(out, jnp.broadcast_to(jnp.exp(log_std), out.shape))  # [..., A]


class Critic(nn.Module):
    """obs [..., obs_dim] -> state value [...]."""

    hidden_size: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = torso(obs, self.hidden_size)
        return dense(1, 1.0)(x)[..., 0]  # [PPO-2] value head gain 1.0


# ===== 3. State ======================================================================

Params = Any  # a flax parameter pytree


class AgentParams(NamedTuple):
    actor: Params
    critic: Params


class RunningMeanStd(NamedTuple):
    """Running mean and variance (parallel Welford), for obs and return normalisation."""

    mean: jax.Array  # [obs_dim] or []
    var: jax.Array  # same shape as mean
    count: jax.Array  # []


class Hyperparameters(NamedTuple):
    """The flags marked [traced] in Args: a run carries their values in its state instead of compiling
    them in as constants, so a --sweep over them trains every configuration in one program."""

    learning_rate: jax.Array  # [] each
    gamma: jax.Array
    gae_lambda: jax.Array
    clip_coef: jax.Array
    ent_coef: jax.Array
    vf_coef: jax.Array
    max_grad_norm: jax.Array


class RunnerState(NamedTuple):
    """Everything the training carries from one iteration to the next (and checkpoints). The
    env fields (ENV_FIELDS) are split along the mesh's "data" axis; see state_specs."""

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
    hyper: Hyperparameters  # this run's values of the traced flags (fixed for the whole run)


ENV_FIELDS = ("env_state", "obs", "episode_return", "episode_length", "discounted_return")  # [N, ...]


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


class RolloutRandomness(NamedTuple):
    """The rollout's random numbers, drawn before it for speed (see rollout); the scan slices one
    step [N, ...] at a time."""

    action_noise: jax.Array  # [T, N, A] Gumbel (discrete) or standard normal (continuous)
    env_keys: jax.Array  # [T, N, 2] a key for each env's step


class Batch(NamedTuple):
    """What the minibatch gradient steps read: leading axes [T, N] for the whole rollout, [N/G,
    T*G/M] for one minibatch (N/G groups of G envs, the axis split over the devices)."""

    obs: jax.Array  # [..., obs_dim] normalised
    action: jax.Array  # [...] or [..., A]
    log_prob: jax.Array  # [...] log pi_old(action | obs)
    value: jax.Array  # [...] old value estimates
    advantage: jax.Array  # [...]
    target: jax.Array  # [...] returns = advantage + value


# ===== 4. The algorithm's math: small pure functions =================================


def rms_init(shape: tuple[int, ...]) -> RunningMeanStd:
    return RunningMeanStd(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4))


def rms_update(rms: RunningMeanStd, x: jax.Array) -> RunningMeanStd:
    """Merge a batch x [*batch_axes, *shape] into the running statistics (Chan et al. parallel update);
    every leading axis (e.g. [T, N]) is a batch axis, as flattening them would move samples between
    devices."""
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


# The done convention, which compute_gae and the rollout follow.
#   terminated[t]: the episode truly ended at step t (the MDP stops), so nothing is
#                  bootstrapped and the value after it is 0.
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
    # [PPO-18] a time limit is no termination: a truncated step bootstraps from V(final_obs)
    next_values = jnp.where(truncated, final_values, next_values)
    next_values = jnp.where(terminated, 0.0, next_values)
    episode_continues = 1.0 - jnp.logical_or(terminated, truncated)  # [T, N]
    deltas = rewards + gamma * next_values - values  # [T, N]

    def gae_step(
        advantage_after: jax.Array, step: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        delta, continues = step  # [N], [N]
        advantage = delta + gamma * gae_lambda * continues * advantage_after
        return advantage, advantage

    inputs = (deltas, episode_continues)
    _, advantages = jax.lax.scan(gae_step, jnp.zeros_like(last_value), inputs, reverse=True)
    return advantages, advantages + values


def policy_loss_fn(
    new_log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_coef: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """[PPO-8] clipped surrogate objective, negated; all inputs of one shape [...]. The
    advantages come normalised per minibatch already ([PPO-7], by normalize_advantages).

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
    """[PPO-9] value loss 0.5 * (V - target)^2, optionally clipped around the old values. [...] -> []."""
    unclipped = (new_values - targets) ** 2
    if not clip:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + jnp.clip(new_values - old_values, -clip_coef, clip_coef)
    return 0.5 * jnp.maximum(unclipped, (clipped_values - targets) ** 2).mean()


def explained_variance(predicted: jax.Array, target: jax.Array) -> jax.Array:
    """[PPO-12] 1 - Var(target - predicted) / Var(target); NaN when the target is constant."""
    var_target = jnp.var(target)
    return jnp.where(var_target == 0, jnp.nan, 1.0 - jnp.var(target - predicted) / var_target)


def annealed_learning_rate(args: Args, iteration: jax.Array, num_iterations: int) -> jax.Array:
    """[PPO-4] linear decay from learning_rate at iteration 0 towards 0 at the end."""
    if not args.anneal_lr:
        return jnp.asarray(args.learning_rate, jnp.float32)
    return args.learning_rate * (1.0 - iteration / num_iterations)


# --- What the mesh needs: minibatches that stay on their device, the --fsdp layout ---------


def shuffle_into_minibatches(batch: Batch, key: jax.Array, num_minibatches: int, group_envs: int) -> Batch:
    """[PPO-6] deal the rollout [T, N, ...] into M shuffled minibatches [M, N/G, T*G/M, ...].

    The N envs form N/G groups of G consecutive envs. Each group's T*G samples are permuted
    (with the key fold_in(key, group index)) and cut into M equal parts; minibatch m is part m
    of every group. When every device holds whole groups (G divides N/D), the group axis is the split
    one: no sample leaves its device, and nothing here depends on D.
    """
    T, N = batch.advantage.shape
    num_groups = N // group_envs
    group_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(num_groups))
    permutations = jax.vmap(lambda k: jax.random.permutation(k, T * group_envs))(group_keys)  # [N/G, T*G]

    def deal(x: jax.Array) -> jax.Array:  # [T, N, ...]
        x = jnp.swapaxes(x, 0, 1).reshape(num_groups, group_envs * T, *x.shape[2:])  # [N/G, G*T, ...]
        x = jax.vmap(lambda xs, permutation: xs[permutation])(x, permutations)  # shuffled in its group
        x = x.reshape(num_groups, num_minibatches, -1, *x.shape[2:])  # [N/G, M, G*T/M, ...]
        return jnp.swapaxes(x, 0, 1)  # [M, N/G, G*T/M, ...]

    return jax.tree.map(deal, batch)


def normalize_advantages(advantages: jax.Array) -> jax.Array:
    """[PPO-7] advantages [M, ...] -> zero mean and unit std within each minibatch m. Done for
    all M minibatches before their steps: the statistics cross devices once per epoch, and a
    minibatch step's only collective is the gradient's all-reduce."""
    axes = tuple(range(1, advantages.ndim))
    mean, std = advantages.mean(axes, keepdims=True), advantages.std(axes, keepdims=True)
    return (advantages - mean) / (std + 1e-8)


def fsdp_spec(shape: tuple[int, ...], num_devices: int) -> P:
    """--fsdp: split a parameter (or Adam moment) along its largest axis that D divides;
    replicate it when none does (small biases, scalars)."""
    axes = [axis for axis, size in enumerate(shape) if size % num_devices == 0 and size >= num_devices]
    if not axes:
        return P()
    return P(*([None] * max(axes, key=lambda a: shape[a])), "data")


# ===== 5. Training: rollout, update, make_train ======================================


class Sizes(NamedTuple):
    """The sizes derived from Args, in this one place (never command-line flags)."""

    batch_size: int  # T*N = num_steps * num_envs, the env steps of one iteration
    minibatch_size: int  # B = T*N / M
    num_iterations: int  # total_timesteps // (T*N)
    group_envs: int  # G, envs whose samples are shuffled together (--shuffle-group-envs, or derived)
    data_axis: int  # D, devices that share one seed's envs, the mesh's "data" axis (--data-devices)
    seeds_axis: int  # the mesh's "seeds" axis, device count / D
    envs_per_device: int  # L = N / D


class Setup(NamedTuple):
    """Everything built once from Args (by build_setup, below); every function of this section takes it."""

    args: Args
    sizes: Sizes
    spec: EnvSpec
    actor: Actor
    critic: Critic
    optimizer: optax.GradientTransformation
    mesh: Mesh  # axes ("seeds", "data")


def make_optimizer(args: Args) -> optax.GradientTransformation:
    """[PPO-11] global gradient-norm clipping, then [PPO-3] Adam with eps 1e-5; minibatch_step applies the
    learning rate."""
    return optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.scale_by_adam(eps=1e-5))


def run_setup(setup: Setup, hyper: Hyperparameters) -> Setup:
    """The setup of one run: args holding its traced flags' values, and the optimizer built from them."""
    args = with_hyperparameters(setup.args, hyper)
    return setup._replace(args=args, optimizer=make_optimizer(args))


def flatten_obs(obs: jax.Array) -> jax.Array:
    """[N, *obs_shape] -> [N, obs_dim]: the rollout stores observations flat (MinAtar images too)."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


def shard_envs(setup: Setup, x: jax.Array, axis: int = 0) -> jax.Array:
    """Split axis `axis` of x (envs, or groups of envs) along the mesh's "data" axis; the partitioner
    propagates the rest. Under the harness's vmap over seeds the seed axis goes in front, on "seeds"."""
    return jax.lax.with_sharding_constraint(x, NamedSharding(setup.mesh, P(*([None] * axis), "data")))


def rollout_step(
    setup: Setup, state: RunnerState, randomness: RolloutRandomness
) -> tuple[RunnerState, Transition]:
    """Act once in the N environments. Parameters and observation statistics stay fixed."""
    args, spec = setup.args, setup.spec
    policy = setup.actor.apply(state.params.actor, normalize(state.obs, state.obs_rms, args.normalize_obs))
    # pi is sampled from the noise drawn ahead, for speed (see rollout)
    if spec.discrete:  # a sample of pi: argmax(logits + Gumbel noise), the Gumbel-max trick
        action = jnp.argmax(policy.logits + randomness.action_noise, axis=-1)  # [N]
    else:  # a sample of N(mean, std^2): mean + std * standard normal noise
        action = policy.loc + policy.scale_diag * randomness.action_noise  # [N, A]
    # [PPO-15] the env gets the action clipped to its bounds; the update uses the sample
    env_action = action if spec.discrete else jnp.clip(action, spec.action_low, spec.action_high)
    # [PPO-1] vectorised environments: the one policy acts in all N envs at once
    step = step_envs(spec, randomness.env_keys, state.env_state, env_action)
    done = jnp.logical_or(step.terminated, step.truncated)  # [N]
    episode_return = state.episode_return + step.reward
    episode_length = state.episode_length + 1
    # [PPO-17] reward scaling: divide by the std of the discounted return (NormalizeReward)
    discounted_return = state.discounted_return * args.gamma + step.reward
    return_rms, reward = state.return_rms, step.reward
    if args.normalize_reward:
        return_rms = rms_update(return_rms, discounted_return)
        reward = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -10.0, 10.0)
    final_obs = flatten_obs(step.final_obs)
    transition = Transition(
        state.obs, action, reward, step.terminated, step.truncated, final_obs, episode_return, episode_length
    )
    state = state._replace(
        env_state=step.state,
        obs=flatten_obs(step.obs),
        episode_return=jnp.where(done, 0.0, episode_return),
        episode_length=jnp.where(done, 0, episode_length),
        return_rms=return_rms,
        discounted_return=jnp.where(done, 0.0, discounted_return),
    )
    return state, transition


def rollout(setup: Setup, state: RunnerState) -> tuple[RunnerState, Transition]:
    """num_steps steps of the N envs: the trajectory [T, N, ...]."""
    # The rollout's random numbers come in one batched draw each, before its scan, for speed, as in
    # ppo_jax_scan.py, where a draw in every step made the training 7% slower on CartPole and 13%
    # on Pendulum on XLA CPU (docs/ppo_jax_scan.md, "Measured"; not measured here).
    key, action_key, env_key = jax.random.split(state.key, 3)
    shape = (setup.args.num_steps, setup.args.num_envs, setup.spec.action_dim)  # [T, N, A]
    draw = jax.random.gumbel if setup.spec.discrete else jax.random.normal
    randomness = RolloutRandomness(draw(action_key, shape), jax.random.split(env_key, shape[:2]))
    # Each device draws its own envs' part, the same numbers one device would draw, so D does not
    # change the training.
    randomness = jax.tree.map(lambda x: shard_envs(setup, x, axis=1), randomness)  # [T, N, ...]
    return jax.lax.scan(functools.partial(rollout_step, setup), state._replace(key=key), randomness)


class LossInfo(NamedTuple):
    value_loss: jax.Array
    policy_loss: jax.Array
    entropy: jax.Array
    old_approx_kl: jax.Array
    approx_kl: jax.Array
    clipfrac: jax.Array


def loss_fn(setup: Setup, params: AgentParams, batch: Batch) -> tuple[jax.Array, LossInfo]:
    args = setup.args
    policy = setup.actor.apply(params.actor, batch.obs)
    new_log_prob = policy.log_prob(batch.action)  # [N/G, T*G/M]
    policy_loss, old_approx_kl, approx_kl, clipfrac = policy_loss_fn(
        new_log_prob, batch.log_prob, batch.advantage, args.clip_coef
    )
    new_values = setup.critic.apply(params.critic, batch.obs)  # [N/G, T*G/M]
    value_loss = value_loss_fn(new_values, batch.value, batch.target, args.clip_coef, args.clip_vloss)
    entropy = policy.entropy().mean()  # [PPO-10] entropy bonus
    loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss
    return loss, LossInfo(value_loss, policy_loss, entropy, old_approx_kl, approx_kl, clipfrac)


class EpochCarry(NamedTuple):
    params: AgentParams
    opt_state: optax.OptState
    learning_rate: jax.Array  # []
    key: jax.Array
    kl_exceeded: jax.Array  # [] bool, set once an epoch ends with approx_kl > target_kl


def minibatch_step(setup: Setup, carry: EpochCarry, minibatch: Batch) -> tuple[EpochCarry, LossInfo]:
    # The loss is a mean over the whole minibatch, whose rows lie on D devices: the gradient is
    # where the partitioner inserts the all-reduce (one, all leaves combined).
    grads, info = jax.grad(functools.partial(loss_fn, setup), has_aux=True)(carry.params, minibatch)
    updates, opt_state = setup.optimizer.update(grads, carry.opt_state, carry.params)
    # [PPO-4] Adam's step times the annealed rate, applied here so the logged rate is the one used
    updates = jax.tree.map(lambda u: -carry.learning_rate * u, updates)
    return carry._replace(params=optax.apply_updates(carry.params, updates), opt_state=opt_state), info


def sgd_epoch(setup: Setup, carry: EpochCarry, batch: Batch) -> tuple[EpochCarry, LossInfo]:
    """[PPO-6] one pass over the rollout [T, N] in shuffled minibatches that stay on their
    device. LossInfo: [M] per minibatch."""
    args = setup.args
    key, permutation_key = jax.random.split(carry.key)
    carry = carry._replace(key=key)
    minibatches = shuffle_into_minibatches(  # [M, N/G, T*G/M, ...]
        batch, permutation_key, args.num_minibatches, setup.sizes.group_envs
    )
    minibatches = jax.tree.map(lambda x: shard_envs(setup, x, axis=1), minibatches)  # N/G split
    if args.norm_adv:  # [PPO-7] normalise advantages per minibatch
        minibatches = minibatches._replace(advantage=normalize_advantages(minibatches.advantage))

    def run(c: EpochCarry) -> tuple[EpochCarry, LossInfo]:
        return jax.lax.scan(functools.partial(minibatch_step, setup), c, minibatches)

    def skip(c: EpochCarry) -> tuple[EpochCarry, LossInfo]:
        return c, LossInfo(*(jnp.full(args.num_minibatches, jnp.nan) for _ in LossInfo._fields))

    if args.target_kl is None:
        return run(carry)
    # [PPO-12] early stop (--target-kl): once an epoch ends with approx_kl > target_kl, the rest are skipped
    carry, info = jax.lax.cond(carry.kl_exceeded, skip, run, carry)
    return carry._replace(kl_exceeded=carry.kl_exceeded | (info.approx_kl[-1] > args.target_kl)), info


class Metrics(NamedTuple):
    """One iteration's metrics (one logged point); train() stacks them to [num_iterations]."""

    episodic_return: jax.Array  # mean return of the episodes finished in this rollout (NaN if none did)
    episodic_length: jax.Array
    learning_rate: jax.Array
    value_loss: jax.Array  # the losses and diagnostics of the last epoch that ran
    policy_loss: jax.Array
    entropy: jax.Array
    old_approx_kl: jax.Array
    approx_kl: jax.Array
    clipfrac: jax.Array  # mean over all minibatch steps of the iteration
    explained_variance: jax.Array


def iteration(setup: Setup, state: RunnerState, index: jax.Array) -> tuple[RunnerState, Metrics]:
    """One PPO iteration: rollout, advantages, update_epochs of minibatch SGD. index [] int32 is
    the iteration's number (not batched over seeds). LossInfo of the epochs is [update_epochs, M]."""
    setup = run_setup(setup, state.hyper)  # the traced flags, as this run's values
    args, sizes, obs_rms = setup.args, setup.sizes, state.obs_rms  # the statistics the rollout used

    # COLLECT TRAJECTORIES
    state, traj = rollout(setup, state)  # traj: [T, N, ...]

    # CALCULATE ADVANTAGE. log pi_old and V of the whole rollout come from one batched pass each
    # after it, not from the acting steps, for speed (one large matmul for T small ones; not
    # measured apart). The numbers are the same, as the parameters did not change while acting.
    def value(raw_obs: jax.Array) -> jax.Array:  # [..., obs_dim] -> [...]
        return setup.critic.apply(state.params.critic, normalize(raw_obs, obs_rms, args.normalize_obs))

    obs = normalize(traj.obs, obs_rms, args.normalize_obs)  # [T, N, obs_dim]
    log_probs = setup.actor.apply(state.params.actor, obs).log_prob(traj.action)  # [T, N] log pi_old
    values, final_values, last_value = value(traj.obs), value(traj.final_obs), value(state.obs)
    gamma, lam = args.gamma, args.gae_lambda
    advantages, targets = compute_gae(  # [T, N]
        traj.reward, values, traj.terminated, traj.truncated, final_values, last_value, gamma, lam
    )
    # kept [T, N, ...], not flattened to [T*N, ...], which would move samples between devices
    batch = Batch(obs, traj.action, log_probs, values, advantages, targets)

    # UPDATE NETWORK
    learning_rate = annealed_learning_rate(args, index, sizes.num_iterations)
    key, epoch_key = jax.random.split(state.key)
    carry = EpochCarry(state.params, state.opt_state, learning_rate, epoch_key, jnp.asarray(False))
    carry, info = jax.lax.scan(lambda c, _: sgd_epoch(setup, c, batch), carry, length=args.update_epochs)
    # [PPO-16] observation normalisation: the statistics of the next rollout, from this one's obs
    if args.normalize_obs:
        state = state._replace(obs_rms=rms_update(obs_rms, traj.obs))
    state = state._replace(params=carry.params, opt_state=carry.opt_state, key=key)

    epochs_run = jnp.sum(~jnp.isnan(info.value_loss[:, 0]))  # all, or fewer with --target-kl
    last_epoch = jax.tree.map(lambda x: x[epochs_run - 1].mean(), info)
    done = jnp.logical_or(traj.terminated, traj.truncated)  # [T, N]
    num_done = done.sum()
    return state, Metrics(
        episodic_return=jnp.where(num_done > 0, (traj.episode_return * done).sum() / num_done, jnp.nan),
        episodic_length=jnp.where(num_done > 0, (traj.episode_length * done).sum() / num_done, jnp.nan),
        learning_rate=learning_rate,
        **last_epoch._replace(clipfrac=jnp.nanmean(info.clipfrac))._asdict(),
        explained_variance=explained_variance(batch.value, batch.target),
    )


# --- Setting up: the processes, the sizes, the mesh, the initial state ---------------------


def start_distributed(args: Args) -> None:
    """--distributed: check its flags, then join the other processes. jax.distributed.initialize
    must come before JAX's backend starts (importing gymnax starts it), so build_setup calls this
    first; a second build in the same process (make_train, evaluate_saved_model) finds it done."""
    flags = ("--coordinator-address", "--num-processes", "--process-id")
    given = dict(zip(flags, (args.coordinator_address, args.num_processes, args.process_id), strict=True))
    named = [flag for flag, value in given.items() if value is not None]
    require(args.distributed or not named, f"{', '.join(named)}: only with --distributed")
    if not args.distributed:
        return
    if named:
        missing = [flag for flag, value in given.items() if value is None]
        require(not missing, f"--distributed with {', '.join(named)} also needs {', '.join(missing)}")
        n, i, address = args.num_processes, args.process_id, args.coordinator_address
        require(n > 0 and 0 <= i < n, f"--process-id {i} must lie in [0, --num-processes {n})")
        require(":" in address, f"--coordinator-address {address!r} must be host:port")
    else:  # JAX reads them from the job's environment
        require(
            any(v in os.environ for v in ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "PMI_RANK")),
            "--distributed needs --coordinator-address, --num-processes and --process-id "
            "(or a SLURM / Open MPI job, where JAX detects them)",
        )
    if not jax.distributed.is_initialized():
        # CPU-only clusters need a collectives library: JAX's gloo one is built in
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)


def build_setup(args: Args) -> Setup:
    """Check PPO's flags and the mesh's (ArgsError: one line naming the flag), derive the sizes,
    build the parts and the mesh."""
    start_distributed(args)
    spec = make_env(args.env_id)
    require_positive(args, "total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs")
    require_positive(args, "hidden_size")
    require(0 <= args.gamma <= 1 and 0 <= args.gae_lambda <= 1, "--gamma and --gae-lambda must lie in [0, 1]")
    require(args.learning_rate > 0, f"--learning-rate must be positive, got {args.learning_rate}")
    epochs = args.update_epochs  # the length of a scan, an int32
    require(epochs < 2**31, f"--update-epochs must be below 2**31, got {epochs}")
    # the loss's coefficients, and the clips: a negative one would turn its term (or the gradient) around
    for flag, value in {"clip-coef": args.clip_coef, "max-grad-norm": args.max_grad_norm}.items():
        require(value > 0, f"--{flag} must be positive, got {value}")
    for flag, value in {"ent-coef": args.ent_coef, "vf-coef": args.vf_coef}.items():
        require(value >= 0, f"--{flag} must be >= 0, got {value}")
    kl = args.target_kl
    require(kl is None or kl >= 0, f"--target-kl must be >= 0 (or unset), got {kl}")
    batch_size = args.num_envs * args.num_steps
    batch = f"num_envs * num_steps = {args.num_envs} * {args.num_steps} = {batch_size}"
    require(
        batch_size % args.num_minibatches == 0,
        f"--num-minibatches {args.num_minibatches} must divide {batch}",
    )
    require(
        args.total_timesteps >= batch_size, f"--total-timesteps {args.total_timesteps} < one batch, {batch}"
    )
    # The mesh: D devices share a seed's envs ("data"); the seeds are split over the rest.
    count = jax.device_count()  # every process's devices
    require(args.data_devices >= 0, f"--data-devices must be >= 0, got {args.data_devices}")
    D = args.data_devices or math.gcd(count, args.num_envs)  # 0 means as many devices as divide both
    require(count % D == 0, f"--data-devices {D} must divide the device count, {count}")
    require(args.num_envs % D == 0, f"--num-envs {args.num_envs} must be divisible by --data-devices {D}")
    require(args.shuffle_group_envs >= 0, f"--shuffle-group-envs must be >= 0, got {args.shuffle_group_envs}")
    T, M, L = args.num_steps, args.num_minibatches, args.num_envs // D
    G = args.shuffle_group_envs or M // math.gcd(M, T)  # the smallest G with M | T*G; not D's
    require(
        (T * G) % M == 0 and L % G == 0,
        f"minibatches must divide per device: every device holds L = num_envs / D = {args.num_envs} / {D} "
        f"= {L} envs in groups of --shuffle-group-envs G = {G}; G must divide L and --num-minibatches {M} "
        f"must divide num_steps * G = {T} * {G}",
    )
    # Auto axes: the partitioner propagates the layout (Explicit, make_mesh's default, types it)
    mesh = jax.make_mesh((count // D, D), ("seeds", "data"), axis_types=(AxisType.Auto, AxisType.Auto))
    sizes = Sizes(batch_size, batch_size // M, args.total_timesteps // batch_size, G, D, count // D, L)
    optimizer = make_optimizer(args)
    return Setup(args, sizes, spec, Actor(spec, args.hidden_size), Critic(args.hidden_size), optimizer, mesh)


def init_params(setup: Setup, keys: jax.Array) -> AgentParams:
    """[PPO-2] the initial actor and critic; keys [2, 2] (the actor's, the critic's)."""
    dummy_obs = jnp.zeros((1, math.prod(setup.spec.obs_shape)))
    return AgentParams(setup.actor.init(keys[0], dummy_obs), setup.critic.init(keys[1], dummy_obs))


def init_state(setup: Setup, key: jax.Array) -> RunnerState:
    """The state of one seed before the first iteration, its envs split along "data"."""
    key, params_key, reset_key = jax.random.split(key, 3)
    params = one_seed_at_a_time(functools.partial(init_params, setup))(jax.random.split(params_key))
    obs, env_state = reset_envs(setup.spec, reset_key, setup.args.num_envs)
    obs, env_state = jax.tree.map(functools.partial(shard_envs, setup), (flatten_obs(obs), env_state))
    num_envs, obs_dim = setup.args.num_envs, math.prod(setup.spec.obs_shape)
    return RunnerState(
        params=params,
        opt_state=setup.optimizer.init(params),
        env_state=env_state,
        obs=obs,  # [N, obs_dim]
        episode_return=jnp.zeros(num_envs),
        episode_length=jnp.zeros(num_envs, jnp.int32),
        obs_rms=rms_init((obs_dim,)),
        return_rms=rms_init(()),
        discounted_return=jnp.zeros(num_envs),
        key=key,
        hyper=hyperparameters(setup.args),
    )


def state_specs(setup: Setup, state: RunnerState) -> RunnerState:
    """Where each leaf of one seed's state lies on the mesh, a PartitionSpec per leaf (the harness
    puts the seed axis in front, along "seeds"): the env axis [N] of ENV_FIELDS along "data";
    parameters and Adam moments replicated, or with --fsdp split along their largest axis that
    D divides; the rest (statistics, key, hyper: the traced flags' values, [] per seed) replicated."""

    def layout(name: str, leaf: Any) -> P:
        if name in ENV_FIELDS:
            return P("data")
        if name in ("params", "opt_state") and setup.args.fsdp:
            return fsdp_spec(leaf.shape, setup.sizes.data_axis)
        return P()

    return RunnerState(
        *(jax.tree.map(functools.partial(layout, name), getattr(state, name)) for name in state._fields)
    )


def make_train(args: Args) -> Callable[[jax.Array], tuple[RunnerState, Metrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains S seeds, each one's
    envs split along "data". The seeds are not split here; the harness's vmap over "seeds" splits them."""
    setup = build_setup(args)

    def train(key: jax.Array) -> tuple[RunnerState, Metrics]:
        indices = jnp.arange(setup.sizes.num_iterations)
        return jax.lax.scan(functools.partial(iteration, setup), init_state(setup, key), indices)

    return train


# ===== 6. The evaluation policy, and PPO as the run harness sees it ==================


class SavedModel(NamedTuple):  # what --save-model writes: enough to act
    params: AgentParams
    obs_rms: RunningMeanStd  # the observation statistics (used when --normalize-obs)


def greedy_action(setup: Setup, model: SavedModel, obs: jax.Array) -> jax.Array:
    """The evaluation policy: the likeliest action, or the mean clipped. [E, *obs_shape] -> [E] or [E, A]."""
    obs = normalize(flatten_obs(obs), model.obs_rms, setup.args.normalize_obs)
    action = setup.actor.apply(model.params.actor, obs).mode()
    return action if setup.spec.discrete else jnp.clip(action, setup.spec.action_low, setup.spec.action_high)


def make_algorithm(args: Args) -> Algorithm:
    """PPO on the mesh for the run harness (its fields are explained there); ArgsError for a bad flag."""
    setup = build_setup(args)
    return Algorithm(
        name="PPO",
        sizes=setup.sizes,
        env=setup.spec,
        env_steps_per_iteration=setup.sizes.batch_size,
        init=functools.partial(init_state, setup),
        iteration=functools.partial(iteration, setup),
        metrics=Metrics,
        model=lambda state: SavedModel(state.params, state.obs_rms),
        act=functools.partial(greedy_action, setup),
        mesh=setup.mesh,
        state_specs=functools.partial(state_specs, setup),
        # XLA level 1 for its chunk on a CPU, for speed, as ppo_jax_scan.py's: docs/harness.md
        # measures that one ("What the harness does for speed")
        chunk_cpu_opt_level=1,
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
