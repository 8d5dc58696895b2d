"""Soft Actor-Critic (SAC) for continuous actions, the whole training compiled with jax.lax.scan.

Algorithm: Haarnoja et al. 2018, "Soft Actor-Critic" (arXiv:1801.01290) and "Soft Actor-Critic
Algorithms and Applications" (arXiv:1812.05905: twin Q critics, automatic entropy tuning), as
CleanRL's sac_continuous_action.py. Its details are tagged `# [SAC-k]` here and listed in
docs/sac_jax.md. The replay buffer is a JAX pytree carried through the scan, like the envs.

Run `python vibe_rl/sac_jax.py --env-id Pendulum-v1`. It writes
runs/{env_id}__{exp_name}__{seed}__{unix_time}/: args.json, TensorBoard events, metrics.jsonl,
checkpoints/ (replay buffer included), eval.json, episodic_return.png; {exp_name}.flax with
--save-model, videos/eval.gif with --capture-video. --resume RUN_DIR continues a run exactly.

How to read this file:
    1-4  Args, the environment, the networks (the policy: `SquashedGaussian`), the
         state (NamedTuples, a shape on every field).
    5    the math as small pure tested functions: td_target, the losses, polyak_update, the buffer.
    6    training. `iteration` is one SAC iteration: one step of the num_envs envs into the buffer,
         then `learn`: a critic step, the delayed actor and alpha steps, the target update.
         `block`: the iterations between two logged points. `make_train(args)`: train(key).
    7    the evaluation policy, and `make_algorithm`: SAC as the run harness sees it.
    Below the "Run harness" banner is the machinery every vibe_rl script shares, word for
    word: run directories, logging, checkpoints, resume, the command line. Stop reading there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

# ===== 1. Arguments ==================================================================


@dataclass
class Args:
    # The run: the same flags in every vibe_rl script
    exp_name: str = Path(__file__).stem
    """the name of this experiment (part of the run directory's name)"""
    seed: int = 1
    """seed of the first run; with --num-seeds N the runs use seed, seed+1, ..."""
    num_seeds: int = 1
    """independent runs trained together in one program, sharded over the devices"""
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
    """continue the run stored in this run directory from its newest readable checkpoint"""
    num_chunks: int = 10
    """the training runs as this many compiled chunks; logs and checkpoints between them"""
    eval_episodes: int = 32
    """episodes of the final deterministic evaluation (run in parallel)"""
    cpu_devices: int = 0
    """CPU devices JAX exposes when there is no accelerator (seeds are sharded over them); 0: one per core"""
    jax_cache_dir: str = "~/.cache/vibe_rl/jax"
    """JAX's persistent compilation cache: a repeated configuration compiles fast ('' turns it off)"""

    # SAC (CleanRL sac_continuous_action.py's defaults, except env_id, total_timesteps and
    # buffer_size: docs/sac_jax.md says why)
    env_id: str = "Pendulum-v1"
    """the id of the gymnax environment (continuous actions)"""
    total_timesteps: int = 50_000
    """total environment steps of the training, per seed (rounded down to whole logged blocks)"""
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
    """the entropy coefficient, held fixed with --no-autotune (autotune starts it at 1, as CleanRL)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient toward the target entropy -|A|"""
    hidden_size: int = 256
    """width of the two hidden layers of the actor and of each critic"""
    log_frequency: int = 100
    """env steps between two logged points: returns and losses are averaged over them (CleanRL: 100)"""


# ===== 2. Environment ================================================================


class EnvSpec(NamedTuple):
    """What the networks and the training need to know about the environment."""

    env: Any  # a gymnax Environment
    env_params: Any  # its EnvParams
    obs_dim: int  # observations are flattened: [*obs_shape] -> [obs_dim]
    action_dim: int  # A
    action_low: np.ndarray  # [A]
    action_high: np.ndarray  # [A]


def make_env(env_id: str) -> EnvSpec:
    # gymnax is imported here, not at the top: its import starts JAX, and the run harness
    # first sets the number of CPU devices.
    import gymnax
    from gymnax.environments import spaces

    known = gymnax.registered_envs
    require(env_id in known, f"--env-id {env_id!r} is not a gymnax environment; valid: {', '.join(known)}")
    env, env_params = gymnax.make(env_id)
    space = env.action_space(env_params)
    other = f"use dqn_jax.py or ppo_jax_scan.py for {type(space).__name__} actions"
    require(isinstance(space, spaces.Box), f"--env-id {env_id}: SAC needs continuous (Box) actions; {other}")
    action_dim, obs_dim = math.prod(space.shape), math.prod(env.observation_space(env_params).shape)
    low, high = (np.broadcast_to(np.asarray(x, np.float32), (action_dim,)) for x in (space.low, space.high))
    return EnvSpec(env, env_params, obs_dim, action_dim, low, high)


def flatten_obs(obs: jax.Array) -> jax.Array:
    """[N, *obs_shape] -> [N, obs_dim]."""
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


# ===== 3. Networks, and the policy distribution ======================================

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def squash_log_std(raw: jax.Array) -> jax.Array:
    """[SAC-4] raw head output [..., A] -> log_std in [LOG_STD_MIN, LOG_STD_MAX] via tanh."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)


def action_scale_bias(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[SAC-5] the affine map [-1, 1] -> [low, high]: a = scale * u + bias; low, high [A]."""
    return (high - low) / 2.0, (high + low) / 2.0


class SquashedGaussian(NamedTuple):
    """[SAC-3] the policy: a = scale * tanh(x) + bias, x ~ N(mean, exp(log_std)^2), per action
    dimension. By the change of variables, log pi(a) = log N(x) - sum_A (log scale + log(1 - tanh(x)^2)),
    evaluated at the sample x (never at arctanh(a), inexact near the bounds)."""

    mean: jax.Array  # [..., A]
    log_std: jax.Array  # [..., A]
    scale: np.ndarray  # [A] [SAC-5] from action_scale_bias
    bias: np.ndarray  # [A]

    def squash(self, x: jax.Array) -> jax.Array:
        """x [..., A] -> the action scale * tanh(x) + bias, inside [low, high]."""
        return self.scale * jnp.tanh(x) + self.bias

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A reparameterised sample (gradients flow into mean and log_std): action [..., A], log pi [...]."""
        noise = jax.random.normal(key, self.mean.shape)  # [..., A], = (x - mean) / std
        x = self.mean + jnp.exp(self.log_std) * noise
        log_normal = -0.5 * jnp.square(noise) - self.log_std - 0.5 * math.log(2 * math.pi)  # log N(x)
        log_one_minus_tanh_sq = 2.0 * (math.log(2.0) - x - jax.nn.softplus(-2.0 * x))  # stable for large |x|
        log_prob = jnp.sum(log_normal - jnp.log(self.scale) - log_one_minus_tanh_sq, axis=-1)
        return self.squash(x), log_prob

    def sample(self, key: jax.Array) -> jax.Array:
        """An action [..., A] alone (XLA drops the unused log-probability)."""
        return self.sample_and_log_prob(key)[0]


class Actor(nn.Module):
    """obs [..., obs_dim] -> the policy pi(.|obs), a distribution over actions [..., A]."""

    spec: EnvSpec
    hidden_size: int = 256

    @nn.compact
    def __call__(self, obs: jax.Array) -> SquashedGaussian:
        # [SAC-14] two hidden ReLU layers, flax's default (LeCun normal) initialisation
        x = nn.relu(nn.Dense(self.hidden_size)(obs))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        mean = nn.Dense(self.spec.action_dim)(x)
        log_std = squash_log_std(nn.Dense(self.spec.action_dim)(x))
        scale, bias = action_scale_bias(self.spec.action_low, self.spec.action_high)
        return SquashedGaussian(mean, log_std, scale, bias)


class QNetwork(nn.Module):
    """(obs [..., obs_dim], action [..., A]) -> Q [...]; the action is in the env's units."""

    hidden_size: int = 256

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs, action], axis=-1)  # [SAC-14] Q(s, a) on concat(s, a)
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        x = nn.relu(nn.Dense(self.hidden_size)(x))
        return nn.Dense(1)(x)[..., 0]


# ===== 4. State ======================================================================

Params = Any  # a flax parameter pytree


class SACParams(NamedTuple):
    """The learned parameters; also what --save-model writes."""

    actor: Params
    critic: Params  # the twin critics, stacked: every leaf [2, ...]
    critic_target: Params  # their Polyak averages, [2, ...]
    log_alpha: jax.Array  # [] the entropy coefficient is alpha = exp(log_alpha), always


class Transition(NamedTuple):
    """One step of the N envs, [N, ...]. The replay buffer stores them as rows, [R, N, ...]; a
    sample of it has the same fields, [B, ...] (`Batch`)."""

    obs: jax.Array  # [N, obs_dim]
    action: jax.Array  # [N, A] in the env's units
    reward: jax.Array  # [N]
    next_obs: jax.Array  # [N, obs_dim] the real next observation (before auto-reset)
    terminated: jax.Array  # [N] float 1.0 where the episode truly ended


class ReplayBuffer(NamedTuple):
    """[SAC-1] A ring of R rows (R = Sizes.buffer_rows); a row holds one step of all N envs."""

    data: Transition  # [R, N, ...]
    position: jax.Array  # [] int32, the row written next
    filled: jax.Array  # [] int32, rows written so far (at most R)


Batch = Transition  # [B, ...]: what buffer_sample returns and the losses read


class Learner(NamedTuple):
    """What the gradient steps change: the parameters and their three Adam states [SAC-11]."""

    params: SACParams
    actor_opt: optax.OptState
    critic_opt: optax.OptState  # of both critics together
    alpha_opt: optax.OptState


class RunnerState(NamedTuple):
    """Everything the training carries from one iteration to the next (and checkpoints)."""

    learner: Learner
    env_state: Any  # gymnax EnvState, batched over envs [N]
    obs: jax.Array  # [N, obs_dim] current observations
    buffer: ReplayBuffer
    episode_return: jax.Array  # [N] return of the running episode
    episode_length: jax.Array  # [N]
    key: jax.Array


class CriticInfo(NamedTuple):  # one critic step's numbers, each []
    qf1_values: jax.Array  # mean Q1(s, a) over the batch
    qf2_values: jax.Array
    qf1_loss: jax.Array
    qf2_loss: jax.Array
    qf_loss: jax.Array  # (qf1_loss + qf2_loss) / 2, as CleanRL logs it


class ActorInfo(NamedTuple):  # one actor (and alpha) step's numbers, each []
    actor_loss: jax.Array
    alpha: jax.Array  # the coefficient used in this step
    alpha_loss: jax.Array  # NaN with --no-autotune


class StepStats(NamedTuple):
    """What one iteration adds to its block's Metrics; the block's scan stacks them to [K]."""

    return_sum: jax.Array  # [] summed return of the episodes that ended at this step
    length_sum: jax.Array  # [] their summed lengths
    episodes: jax.Array  # [] how many ended
    critic: CriticInfo  # NaN without a gradient step (before learning_starts)
    actor: ActorInfo  # NaN without an actor step (delayed: see learn)


# One block's metrics (one logged point), each []; train() stacks them to [num_blocks]: the means
# over the episodes that ended in the block and over its steps of each kind (NaN where it has none).
EPISODE_FIELDS = ("episodic_return", "episodic_length")
METRIC_FIELDS = (*EPISODE_FIELDS, *CriticInfo._fields, *ActorInfo._fields)
Metrics = NamedTuple("Metrics", [(name, jax.Array) for name in METRIC_FIELDS])
METRIC_TAGS = {name: f"{'charts' if name in EPISODE_FIELDS else 'losses'}/{name}" for name in METRIC_FIELDS}


# ===== 5. The algorithm's math: small pure functions =================================


# The done convention, used by td_target and by the iteration:
#   terminated: the episode truly ended (the MDP stops): no bootstrap, the value after it is 0.
#   truncated:  the time limit cut the episode; the state it reached still has a value. The buffer
#               stores as next_obs the real observation reached, info["final_observation"] (not
#               the auto-reset's first observation of the next episode); the target bootstraps
#               from it. So only `terminated` enters the target; truncation needs no flag at all.
def td_target(
    reward: jax.Array,
    terminated: jax.Array,
    next_q: jax.Array,
    next_log_prob: jax.Array,
    alpha: jax.Array,
    gamma: float,
) -> jax.Array:
    """[SAC-7] soft TD target r + gamma * (1 - terminated) * (Q'(s', a') - alpha * log pi(a'|s')).
    reward, terminated, next_log_prob: [B]; next_q: [B], the min of the twin target critics at
    (next_obs, a' ~ pi(.|next_obs)). Returns [B]."""
    return reward + gamma * (1.0 - terminated) * (next_q - alpha * next_log_prob)


def critic_loss_fn(q_values: jax.Array, target: jax.Array) -> tuple[jax.Array, CriticInfo]:
    """Mean squared TD errors of the twin critics, summed. q_values: [2, B]; target: [B]."""
    per_critic = jnp.mean((q_values - target[None]) ** 2, axis=1)  # [2]
    loss = per_critic.sum()
    mean_q = q_values.mean(axis=1)  # [2]
    return loss, CriticInfo(mean_q[0], mean_q[1], per_critic[0], per_critic[1], loss / 2.0)


def actor_loss_fn(log_prob: jax.Array, q_values: jax.Array, alpha: jax.Array) -> jax.Array:
    """E[alpha * log pi(a|s) - min_i Q_i(s, a)], a ~ pi(.|s). log_prob: [B]; q_values: [2, B]."""
    return jnp.mean(alpha * log_prob - jnp.min(q_values, axis=0))  # [SAC-6] min of the twins


def alpha_loss_fn(log_alpha: jax.Array, log_prob: jax.Array, target_entropy: float) -> jax.Array:
    """[SAC-10] -alpha * (log pi + target_entropy), log_prob [B] held fixed. Its gradient in
    log_alpha is -alpha * (E[log pi] + target_entropy): alpha grows while the policy's entropy
    -E[log pi] is below the target and shrinks while it is above."""
    return jnp.mean(-jnp.exp(log_alpha) * (jax.lax.stop_gradient(log_prob) + target_entropy))


def polyak_update(target: Params, online: Params, tau: float) -> Params:
    """[SAC-8] target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree.map(lambda t, o: tau * o + (1.0 - tau) * t, target, online)


def buffer_init(rows: int, num_envs: int, obs_dim: int, action_dim: int) -> ReplayBuffer:
    """[SAC-1] an empty replay buffer of rows x num_envs transitions."""
    zeros = lambda *shape: jnp.zeros((rows, num_envs, *shape))  # [R, N, *shape]
    data = Transition(zeros(obs_dim), zeros(action_dim), zeros(), zeros(obs_dim), zeros())
    return ReplayBuffer(data, position=jnp.asarray(0, jnp.int32), filled=jnp.asarray(0, jnp.int32))


def buffer_add(buffer: ReplayBuffer, transition: Transition) -> ReplayBuffer:
    """[SAC-1] write one step of the N envs at the ring position, overwriting the oldest row."""
    rows, position = buffer.data.obs.shape[0], buffer.position

    def write(store: jax.Array, value: jax.Array) -> jax.Array:  # store [R, N, ...], value [N, ...]
        return jax.lax.dynamic_update_index_in_dim(store, value.astype(store.dtype), position, 0)

    data = jax.tree.map(write, buffer.data, transition)
    return ReplayBuffer(data, (buffer.position + 1) % rows, jnp.minimum(buffer.filled + 1, rows))


def buffer_sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Batch:
    """[SAC-1] batch_size transitions drawn uniformly (with replacement) from the filled rows."""
    row_key, env_key = jax.random.split(key)
    row_index = jax.random.randint(row_key, (batch_size,), 0, buffer.filled)  # [B]
    env_index = jax.random.randint(env_key, (batch_size,), 0, buffer.data.obs.shape[1])  # [B]
    return jax.tree.map(lambda x: x[row_index, env_index], buffer.data)


# ===== 6. Training: iteration, learn, block, make_train ==============================


class SAC(NamedTuple):
    """One configuration (built by build_sac below). Every function of this section takes it."""

    args: Args
    sizes: Sizes
    spec: EnvSpec
    actor: Actor
    critic: QNetwork  # one critic; twin_q applies both
    actor_optimizer: optax.GradientTransformation
    q_optimizer: optax.GradientTransformation  # the critics' and log_alpha's (each its own state)


def nans(info_type: type) -> Any:
    """An info NamedTuple of NaNs: the numbers of a step that was not taken."""
    return info_type(*(jnp.asarray(jnp.nan) for _ in info_type._fields))


def twin_q(sac: SAC, critic_params: Params, obs: jax.Array, action: jax.Array) -> jax.Array:
    """[SAC-6] both critics in one call (their parameters are stacked, [2, ...]): [B, ...] -> [2, B]."""
    return jax.vmap(sac.critic.apply, in_axes=(0, None, None))(critic_params, obs, action)


def critic_step(sac: SAC, learner: Learner, batch: Batch, key: jax.Array) -> tuple[Learner, CriticInfo]:
    """One gradient step of the twin critics toward the soft TD target."""
    params = learner.params
    next_action, next_log_prob = sac.actor.apply(params.actor, batch.next_obs).sample_and_log_prob(key)
    next_q = jnp.min(twin_q(sac, params.critic_target, batch.next_obs, next_action), axis=0)  # [B]
    alpha, gamma = jnp.exp(params.log_alpha), sac.args.gamma
    target = td_target(batch.reward, batch.terminated, next_q, next_log_prob, alpha, gamma)  # [B]
    loss = lambda critic: critic_loss_fn(twin_q(sac, critic, batch.obs, batch.action), target)
    grads, info = jax.grad(loss, has_aux=True)(params.critic)
    updates, critic_opt = sac.q_optimizer.update(grads, learner.critic_opt, params.critic)
    params = params._replace(critic=optax.apply_updates(params.critic, updates))
    return learner._replace(params=params, critic_opt=critic_opt), info


def actor_step(sac: SAC, batch: Batch, learner: Learner, key: jax.Array) -> tuple[Learner, ActorInfo]:
    """One gradient step of the actor, then (--autotune) one of log_alpha."""
    params, alpha = learner.params, jnp.exp(learner.params.log_alpha)

    def loss(actor_params: Params) -> tuple[jax.Array, jax.Array]:
        # reparameterised: the gradient flows through the sampled action into the critics
        action, log_prob = sac.actor.apply(actor_params, batch.obs).sample_and_log_prob(key)
        return actor_loss_fn(log_prob, twin_q(sac, params.critic, batch.obs, action), alpha), log_prob

    (actor_loss, log_prob), grads = jax.value_and_grad(loss, has_aux=True)(params.actor)
    updates, actor_opt = sac.actor_optimizer.update(grads, learner.actor_opt, params.actor)
    learner = learner._replace(params=params._replace(actor=optax.apply_updates(params.actor, updates)))
    alpha_loss = jnp.asarray(jnp.nan)
    if sac.args.autotune:  # [SAC-10] without it, log_alpha keeps its initial value log(--alpha)
        target_entropy = -float(sac.spec.action_dim)
        alpha_loss, grad = jax.value_and_grad(alpha_loss_fn)(params.log_alpha, log_prob, target_entropy)
        updates, alpha_opt = sac.q_optimizer.update(grad, learner.alpha_opt, params.log_alpha)
        log_alpha = optax.apply_updates(params.log_alpha, updates)
        learner = learner._replace(params=learner.params._replace(log_alpha=log_alpha), alpha_opt=alpha_opt)
    return learner._replace(actor_opt=actor_opt), ActorInfo(actor_loss, alpha, alpha_loss)


def learn(
    sac: SAC, learner: Learner, buffer: ReplayBuffer, key: jax.Array, index: jax.Array
) -> tuple[Learner, CriticInfo, ActorInfo]:
    """One gradient step of the critics; the delayed actor steps and the target update when due.
    index: [] the iteration's number, not batched over seeds: the two conds stay real branches."""
    args = sac.args
    sample_key, critic_key, actor_key = jax.random.split(key, 3)
    batch = buffer_sample(buffer, sample_key, args.batch_size)  # [B, ...]
    learner, critic_info = critic_step(sac, learner, batch, critic_key)

    def actor_steps(learner: Learner) -> tuple[Learner, ActorInfo]:
        keys = jax.random.split(actor_key, args.policy_frequency)
        learner, infos = jax.lax.scan(functools.partial(actor_step, sac, batch), learner, keys)
        return learner, jax.tree.map(jnp.mean, infos)  # infos: [policy_frequency]

    # [SAC-9] delayed policy updates: every policy_frequency iterations, policy_frequency actor
    # steps on the same batch, so that the actor and the critics take as many steps
    learner, actor_info = jax.lax.cond(
        index % args.policy_frequency == 0, actor_steps, lambda same: (same, nans(ActorInfo)), learner
    )
    params, polyak = learner.params, functools.partial(polyak_update, tau=args.tau)
    update_target = index % args.target_network_frequency == 0  # [SAC-8] every that many iterations
    target = jax.lax.cond(update_target, polyak, lambda old, _: old, params.critic_target, params.critic)
    return learner._replace(params=params._replace(critic_target=target)), critic_info, actor_info


def iteration(sac: SAC, state: RunnerState, index: jax.Array) -> tuple[RunnerState, StepStats]:
    """One SAC iteration: act in the N envs, store the step, and learn once learning_starts env
    steps are done. index: [] int32, the iteration's number (not batched over seeds)."""
    args, spec, num_envs = sac.args, sac.spec, sac.args.num_envs
    key, policy_key, random_key, step_key, learn_key = jax.random.split(state.key, 5)
    policy_action = sac.actor.apply(state.learner.params.actor, state.obs).sample(policy_key)  # [N, A]
    # [SAC-2] uniformly random actions until learning_starts steps have been taken
    shape, low, high = (num_envs, spec.action_dim), spec.action_low, spec.action_high
    random_action = jax.random.uniform(random_key, shape, minval=low, maxval=high)  # [N, A]
    learning = index * num_envs >= args.learning_starts  # []
    action = jnp.where(learning, policy_action, random_action)
    next_obs, env_state, reward, terminated, truncated, info = jax.vmap(  # [SAC-12] vectorised envs
        spec.env.step, in_axes=(0, 0, 0, None)
    )(jax.random.split(step_key, num_envs), state.env_state, action, spec.env_params)
    # [SAC-7] the buffer gets the real next observation, before the auto-reset (see td_target)
    final_obs = flatten_obs(info["final_observation"])
    buffer = buffer_add(state.buffer, Transition(state.obs, action, reward, final_obs, terminated * 1.0))
    no_learning = lambda same, *_: (same, nans(CriticInfo), nans(ActorInfo))
    learner, critic_info, actor_info = jax.lax.cond(
        learning, functools.partial(learn, sac), no_learning, state.learner, buffer, learn_key, index
    )
    done = jnp.logical_or(terminated, truncated)  # [N]
    episode_return, episode_length = state.episode_return + reward, state.episode_length + 1
    state = RunnerState(
        learner=learner,
        env_state=env_state,
        obs=flatten_obs(next_obs),
        buffer=buffer,
        episode_return=jnp.where(done, 0.0, episode_return),
        episode_length=jnp.where(done, 0, episode_length),
        key=key,
    )
    ended = (episode_return * done).sum(), (episode_length * done).sum(), done.sum()
    return state, StepStats(*ended, critic_info, actor_info)


def block(sac: SAC, state: RunnerState, index: jax.Array) -> tuple[RunnerState, Metrics]:
    """The K = iterations_per_block iterations between two logged points, and their Metrics.
    index: [] int32, the block's number; the iterations' numbers derive from it, unbatched."""
    per_block = sac.sizes.iterations_per_block
    state, stats = jax.lax.scan(  # stats: [K]
        functools.partial(iteration, sac), state, index * per_block + jnp.arange(per_block)
    )
    episodes = stats.episodes.sum()  # none: 0 / 0, NaN, as the means over steps not taken
    critic, actor = jax.tree.map(jnp.nanmean, (stats.critic, stats.actor))
    episode_means = stats.return_sum.sum() / episodes, stats.length_sum.sum() / episodes
    return state, Metrics(*episode_means, *critic, *actor)


# --- Setting up: the sizes, the networks, the initial state ---------------------------


class Sizes(NamedTuple):
    """The sizes derived from Args, in this one place (never command-line flags)."""

    num_iterations: int  # iterations of the run (each one step of the N envs): num_blocks * K
    iterations_per_block: int  # K: one logged point every K * num_envs env steps
    num_blocks: int  # the logged points (the run harness's units)
    buffer_rows: int  # R = buffer_size // num_envs: the replay buffer's rows


def build_sac(args: Args, spec: EnvSpec | None = None) -> SAC:
    """Check SAC's flags (ArgsError: one line naming the flag), derive the sizes, build the parts.
    spec: another env than --env-id's (the tests' probe envs)."""
    spec = spec or make_env(args.env_id)
    require_positive(args, "total_timesteps", "num_envs", "buffer_size", "batch_size", "hidden_size")
    require_positive(args, "policy_frequency", "target_network_frequency", "log_frequency")
    require(0 <= args.gamma <= 1, f"--gamma must lie in [0, 1], got {args.gamma}")
    require(0 < args.tau <= 1, f"--tau must lie in (0, 1], got {args.tau}")
    require(args.policy_lr > 0 and args.q_lr > 0, "--policy-lr and --q-lr must be positive")
    require(args.alpha >= 0 and args.learning_starts >= 0, "--alpha and --learning-starts must be >= 0")
    require(args.buffer_size >= args.num_envs, "--buffer-size must be at least --num-envs")
    iterations = args.total_timesteps // args.num_envs
    require(iterations > 0, "--total-timesteps must be at least --num-envs (one step of the envs)")
    # A logged point every log_frequency env steps: a block of K iterations. The run is rounded
    # down to whole blocks (losing less than a block), never K to the run: K stays the size
    # asked for whatever the budget (a prime number of iterations has no divisor but 1).
    per_block = min(max(1, args.log_frequency // args.num_envs), iterations)
    num_blocks = iterations // per_block
    sizes = Sizes(num_blocks * per_block, per_block, num_blocks, args.buffer_size // args.num_envs)
    last = (sizes.num_iterations - 1) * args.num_envs  # the env step the last iteration starts at
    require(
        args.learning_starts <= last,
        f"--learning-starts {args.learning_starts} leaves no gradient step (the last starts at step {last})",
    )
    # [SAC-11] Adam for each part: policy_lr for the actor, q_lr for the critics and for alpha
    actor, critic = Actor(spec, args.hidden_size), QNetwork(args.hidden_size)
    return SAC(args, sizes, spec, actor, critic, optax.adam(args.policy_lr), optax.adam(args.q_lr))


def init_state(sac: SAC, key: jax.Array) -> RunnerState:
    """The state of one seed before the first iteration."""
    args, spec, num_envs = sac.args, sac.spec, sac.args.num_envs
    key, actor_key, critic_key, reset_key = jax.random.split(key, 4)
    dummy_obs, dummy_action = jnp.zeros((1, spec.obs_dim)), jnp.zeros((1, spec.action_dim))
    critic = jax.vmap(sac.critic.init, in_axes=(0, None, None))(  # [SAC-6] two critics, [2, ...]
        jax.random.split(critic_key), dummy_obs, dummy_action
    )
    # [SAC-10] alpha = exp(log_alpha) starts at 1 with --autotune (as CleanRL), at --alpha without;
    # --alpha 0 is stored as float32's smallest normal number, whose log is finite
    alpha = 1.0 if args.autotune else max(args.alpha, float(np.finfo(np.float32).tiny))
    params = SACParams(sac.actor.init(actor_key, dummy_obs), critic, critic, jnp.log(jnp.float32(alpha)))
    q_init = sac.q_optimizer.init
    learner = Learner(
        params, sac.actor_optimizer.init(params.actor), q_init(critic), q_init(params.log_alpha)
    )
    obs, env_state = jax.vmap(spec.env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, num_envs), spec.env_params
    )
    return RunnerState(
        learner=learner,
        env_state=env_state,
        obs=flatten_obs(obs),  # [N, obs_dim]
        buffer=buffer_init(sac.sizes.buffer_rows, num_envs, spec.obs_dim, spec.action_dim),
        episode_return=jnp.zeros(num_envs),
        episode_length=jnp.zeros(num_envs, jnp.int32),
        key=key,
    )


def make_train(args: Args, spec: EnvSpec | None = None) -> Callable[[jax.Array], tuple[RunnerState, Metrics]]:
    """The PureJaxRL entry point: jax.jit(jax.vmap(make_train(args)))(keys) trains N seeds."""
    sac = build_sac(args, spec)

    def train(key: jax.Array) -> tuple[RunnerState, Metrics]:
        indices = jnp.arange(sac.sizes.num_blocks)  # the blocks' numbers
        return jax.lax.scan(functools.partial(block, sac), init_state(sac, key), indices)

    return train


# ===== 7. The evaluation policy, and SAC as the run harness sees it ==================


def greedy_action(sac: SAC, params: SACParams, obs: jax.Array) -> jax.Array:
    """[SAC-13] the evaluation policy: scale * tanh(mean) + bias. obs [E, *obs_shape] -> [E, A]."""
    policy = sac.actor.apply(params.actor, flatten_obs(obs))
    return policy.squash(policy.mean)


def make_algorithm(args: Args) -> Algorithm:
    """SAC for the run harness (its fields are explained there); ArgsError for a bad flag."""
    sac = build_sac(args)
    return Algorithm(
        name="SAC",
        sizes=sac.sizes,
        env=sac.spec.env,
        env_params=sac.spec.env_params,
        num_units=sac.sizes.num_blocks,  # one unit, one logged point: a block of iterations
        steps_per_unit=sac.sizes.iterations_per_block * args.num_envs,
        init=functools.partial(init_state, sac),
        run_unit=functools.partial(block, sac),
        metric_tags=METRIC_TAGS,
        model=lambda state: state.learner.params,  # SACParams: actor, critics, target critics, log_alpha
        act=functools.partial(greedy_action, sac),
    )


# ===== Run harness: identical in every vibe_rl script. Nothing below is specific to one algorithm =====
# It drives the Algorithm above through its fields alone. All seeds train in one program, their
# axis sharded over the devices, in compiled chunks; between two chunks it logs and checkpoints.

import atexit
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields

import flax.serialization
import tyro
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tensorboardX import SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary


class Algorithm(NamedTuple):
    """What the harness needs from a script (its make_algorithm builds one). A unit is the
    algorithm's step between two logged points (PPO: an iteration); a chunk runs several."""

    name: str
    sizes: NamedTuple  # the derived sizes, written to args.json
    env: Any  # the gymnax environment and its params: evaluation episodes, video
    env_params: Any
    num_units: int
    steps_per_unit: int  # env steps of one unit, per seed
    init: Callable[[jax.Array], Any]  # key -> the state of one seed
    run_unit: Callable[[Any, jax.Array], tuple[Any, Any]]  # (state, unit index []) -> (state, metrics)
    metric_tags: dict[str, str]  # metrics field -> TensorBoard tag (float metrics; episodic_return too)
    model: Callable[[Any], Any]  # state -> what --save-model writes (and the non-finite check reads)
    act: Callable[[Any, jax.Array], jax.Array]  # (model, obs [E, *obs_shape]) -> greedy actions [E, ...]
    mesh: Mesh | None = None  # None: the harness shards the seeds over the devices, one seed per device
    state_specs: Callable[[Any], Any] | None = None  # with a mesh: state -> a PartitionSpec per leaf
    chunk_cpu_opt_level: int | None = None  # on a CPU, the chunk's XLA backend optimisation level


CLASSIC_CONTROL = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")
# Flags of the machine a run happens to run on: never read back from a run's args.json.
MACHINE_FLAGS = {"cpu_devices", "jax_cache_dir", "data_devices", "distributed", "coordinator_address",
    "num_processes", "process_id"}  # fmt: skip
# Flags a --resume may change: they leave the training alone (names an Args lacks are ignored).
RESUME_MAY_CHANGE = MACHINE_FLAGS | {"resume", "output_dir", "track", "wandb_project_name", "wandb_entity",
    "capture_video", "save_model", "eval_episodes", "fsdp"}  # fmt: skip


class ArgsError(ValueError):
    """A bad command-line value: reported in one line, exit status 2, before anything compiles."""


def require(condition: bool, message: str) -> None:
    """The one validation helper: every check of a flag raises ArgsError(message) through it."""
    if not condition:
        raise ArgsError(message)


def require_positive(args: Args, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        require(value > 0, f"--{name.replace('_', '-')} must be a positive integer, got {value}")


class Deferred(types.ModuleType):
    """Stands in sys.modules for a module not imported yet, and imports it when one of its
    attributes is first read. (importlib's LazyLoader loads at the next import statement.)"""

    def __getattr__(self, name: str) -> Any:
        return getattr(import_module(self.__name__), name)


def import_module(name: str) -> types.ModuleType:
    """importlib.import_module, which also loads a module that defer_imports put off."""
    if isinstance(sys.modules.get(name), Deferred):
        sys.modules.pop(name, None)
    return importlib.import_module(name)


def defer_imports(*names: str) -> None:
    for name in names:
        spec = None if name in sys.modules else importlib.util.find_spec(name)
        if spec is not None:
            sys.modules[name] = Deferred(name)
            sys.modules[name].__spec__ = spec


def start_jax(args: Args) -> None:
    """Configure JAX before its backend starts (the first array, or importing gymnax, starts it)."""
    # gymnax imports matplotlib.pyplot and seaborn (with scipy) for renderers of envs it never
    # draws here: ~2 s of every start. They load when first used (the plot), if ever.
    defer_imports("matplotlib.pyplot", "seaborn")
    if args.jax_cache_dir:  # a repeated configuration loads its compiled programs from disk
        jax.config.update("jax_compilation_cache_dir", str(Path(args.jax_cache_dir).expanduser()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        with contextlib.suppress(RuntimeError):  # JAX started already (main() called from Python)
            jax.config.update("jax_num_cpu_devices", args.cpu_devices or cores)  # seeds use every core


# --- Run directories ------------------------------------------------------------------


class Run(NamedTuple):
    """One training of all seeds: what it writes where, and how its seeds lie on the devices."""

    args: Args
    algo: Algorithm
    seeds: list[int]
    dirs: list[Path]  # one run directory per seed
    units_per_chunk: int
    num_chunks: int  # every chunk has work; only the last may be partly masked
    mesh: Mesh  # its axis "seeds" splits the seeds over the devices
    slots: int  # the seeds padded to a multiple of that axis (the padding's results are discarded)


def plan_chunks(num_units: int, num_chunks: int) -> tuple[int, int]:
    """(units per chunk, number of chunks): at most num_chunks chunks, every one with work."""
    units_per_chunk = math.ceil(num_units / min(num_chunks, num_units))
    return units_per_chunk, math.ceil(num_units / units_per_chunk)


def args_from_json(path: Path) -> Args:
    saved = json.loads(path.read_text())
    return Args(**{f.name: saved[f.name] for f in fields(Args) if f.name in saved.keys() - MACHINE_FLAGS})


def resume_args(given: Args) -> Args:
    """With --resume, the run's own Args (its args.json); the flags given must agree with them."""
    if given.resume is None:
        return given
    record = Path(given.resume) / "args.json"
    require(record.is_file(), f"--resume {given.resume}: not a run directory (no args.json)")
    args, defaults = args_from_json(record), Args()
    for name in (f.name for f in fields(Args)):
        value, before = getattr(given, name), getattr(args, name)
        if name in RESUME_MAY_CHANGE and value != getattr(defaults, name):
            setattr(args, name, value)
        conflict = (
            f"--resume {given.resume}: --{name.replace('_', '-')} {value} conflicts with the run's {before}"
        )
        require(value in (getattr(defaults, name), before) or name in RESUME_MAY_CHANGE, conflict)
    return args


def open_run(args: Args) -> Run:
    """Check the flags, then make a new run's directories (one per seed; args.json holds the Args,
    the derived sizes and the sibling seeds' directories) or find those of the --resume run."""
    require_positive(args, "num_seeds", "num_chunks", "eval_episodes")
    require(args.cpu_devices >= 0, f"--cpu-devices must be >= 0, got {args.cpu_devices}")
    if args.capture_video:  # gymnasium draws classic control (with pygame); MinAtar is drawn here
        renderable = args.env_id in CLASSIC_CONTROL or args.env_id.endswith("MinAtar")
        require(renderable, f"--capture-video renders classic-control and MinAtar envs, not {args.env_id}")
        needs_pygame = args.env_id in CLASSIC_CONTROL and importlib.util.find_spec("pygame") is None
        require(not needs_pygame, "--capture-video needs pygame for classic-control envs: pip install pygame")
    if args.track:  # no wandb login: say so now, not after compiling (on a terminal, wandb asks for a key)
        import wandb

        try:
            wandb.login(verify=False)  # offline and disabled modes need no key
        except wandb.errors.UsageError as error:
            raise ArgsError(f"--track: {error} Or set WANDB_MODE=offline.") from None
    algo = make_algorithm(args)
    mesh = algo.mesh
    if mesh is None:  # the fewest devices that spread the seeds most evenly
        per_device = math.ceil(args.num_seeds / min(args.num_seeds, jax.device_count()))
        devices = jax.devices()[: math.ceil(args.num_seeds / per_device)]
        mesh = jax.make_mesh((len(devices),), ("seeds",), axis_types=(AxisType.Auto,), devices=devices)
    slots = math.ceil(args.num_seeds / mesh.shape["seeds"]) * mesh.shape["seeds"]
    seeds = list(range(args.seed, args.seed + args.num_seeds))
    run = Run(args, algo, seeds, [], *plan_chunks(algo.num_units, args.num_chunks), mesh, slots)
    if args.resume is not None:  # found through args.json, whatever the directories are called now
        record = json.loads((Path(args.resume) / "args.json").read_text())
        dirs = [Path(args.resume).parent / name for name in record["seed_dirs"]]
        dirs[seeds.index(record["run_seed"])] = Path(args.resume)
        missing = [str(d) for d in dirs if not (d / "args.json").is_file()]
        require(not missing, f"--resume {args.resume}: its sibling seeds' directories are missing: {missing}")
        return run._replace(dirs=dirs)
    stamp = int(time.time())
    if jax.process_count() > 1:  # every process names the directories with process 0's time
        stamp = int(multihost_utils.broadcast_one_to_all(np.int32(stamp)))
    names = [f"{args.env_id}__{args.exp_name}__{seed}__{stamp}" for seed in seeds]
    for seed, name in zip(seeds, names, strict=True):
        if jax.process_index() == 0:  # in a multi-process run, process 0 writes
            (Path(args.output_dir) / name).mkdir(parents=True)
            record = {**asdict(args), "run_seed": seed, "run_name": name, "seed_dirs": names}
            record["sizes"] = algo.sizes._asdict()
            (Path(args.output_dir) / name / "args.json").write_text(json.dumps(record, indent=2))
    return run._replace(dirs=[Path(args.output_dir) / name for name in names])


# --- Checkpoints and the state on the devices -----------------------------------------


def save_checkpoint(run_dir: Path, units_done: int, global_step: int, state_of_seed: Any) -> None:
    """checkpoints/step_{global_step}.msgpack, written atomically (a temporary file renamed into
    place); then all but the two newest are deleted. A crash always leaves one that reads."""
    path = run_dir / "checkpoints" / f"step_{global_step:012d}.msgpack"
    path.parent.mkdir(exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(flax.serialization.to_bytes({"units_done": units_done, "state": state_of_seed}))
    os.replace(temporary, path)
    for old in sorted(path.parent.glob("step_*.msgpack"))[:-2]:
        old.unlink()


def read_checkpoint(path: Path, template: Any) -> tuple[int, Any]:
    """(units done, the state of one seed); ValueError when the file does not read as one."""
    try:
        saved = flax.serialization.msgpack_restore(path.read_bytes())
        restored = flax.serialization.from_state_dict({"units_done": 0, "state": template}, saved)
    except Exception as error:  # truncated, corrupt, or not a checkpoint of this program
        raise ValueError(f"{path}: {type(error).__name__}: {str(error).splitlines()[0]}") from error
    if jax.tree.map(np.shape, restored["state"]) != jax.tree.map(np.shape, template):
        raise ValueError(f"{path}: its arrays do not fit this run's state")
    return int(restored["units_done"]), restored["state"]


def restore_checkpoints(run: Run) -> tuple[int, list[Any] | None]:
    """(units done, every seed's state) of the newest checkpoint that reads in all seed directories."""
    if run.args.resume is None:
        return 0, None
    template = jax.eval_shape(run.algo.init, jax.random.PRNGKey(0))
    names = {p.name for d in run.dirs for p in (d / "checkpoints").glob("step_*.msgpack")}
    errors = []
    for name in sorted(names, reverse=True):
        try:
            loaded = [read_checkpoint(d / "checkpoints" / name, template) for d in run.dirs]
            return loaded[0][0], [state for _, state in loaded]
        except ValueError as error:
            errors.append(str(error))
    reasons = "; ".join(errors) or "there is none"
    raise ArgsError(f"--resume {run.args.resume}: no checkpoint reads: {reasons}")


def pad_seeds(tree: Any, slots: int) -> Any:
    """[S, ...] -> [slots, ...]: the extra slots repeat the seeds; their results are discarded."""
    return jax.tree.map(lambda x: np.take(x, np.arange(slots) % len(x), axis=0), tree)


def to_host(tree: Any) -> Any:
    """Numpy copies of (sharded) arrays; in a multi-process run, gathered from every process."""
    if jax.process_count() > 1:
        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def seed_slice(tree: Any, i: int) -> Any:
    return jax.tree.map(lambda x: x[i], tree)


# --- The compiled programs: init, one chunk, the final evaluation ----------------------


def seeds_program(
    per_seed: Callable, inputs: tuple, in_axes: Any = 0, level: int | None = None, **jit: Any
) -> Any:
    """jit(vmap(per_seed)) over the seeds, their axis along the mesh's "seeds" axis, compiled for
    the inputs' shapes at XLA's backend optimisation level `level` (None: XLA's default)."""
    lowered = jax.jit(jax.vmap(per_seed, in_axes, spmd_axis_name="seeds"), **jit).lower(*inputs)
    return lowered.compile(None if level is None else {"xla_backend_optimization_level": level})


RUNS_ONCE = 0  # init, evaluate: they compile in about half the time at level 0, and still run in ms


def seed_keys(run: Run) -> np.ndarray:
    """[slots, 2]: each seed's key, jax.random.PRNGKey(seed) (the padding slots repeat them)."""
    return pad_seeds(np.stack([jax.random.PRNGKey(seed) for seed in run.seeds]), run.slots)


def initial_state(run: Run, restored: list[Any] | None) -> Any:
    """Every seed's state on the devices, leaves [slots, ...]: new (init) or restored. The seed axis
    lies along the mesh's "seeds" axis; the algorithm's state_specs lay out the rest."""
    template = jax.eval_shape(run.algo.init, jax.random.PRNGKey(0))
    specs = run.algo.state_specs(template) if run.algo.state_specs else jax.tree.map(lambda _: P(), template)
    seeds_first = lambda spec: NamedSharding(run.mesh, P("seeds", *spec))  # the seed axis, then the specs
    shardings = jax.tree.map(seeds_first, specs, is_leaf=lambda spec: isinstance(spec, P))
    if restored is None:
        keys = seed_keys(run)
        return seeds_program(run.algo.init, (keys,), level=RUNS_ONCE, out_shardings=shardings)(keys)
    host = pad_seeds(jax.tree.map(lambda *xs: np.stack(xs), *restored), run.slots)
    return jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, x.__getitem__), host, shardings)


def run_chunk(algo: Algorithm, units_per_chunk: int, state: Any, first_unit: jax.Array) -> tuple[Any, Any]:
    """units_per_chunk units of one seed; those past the end (last chunk) are skipped, their
    metrics NaN. first_unit is not batched over seeds, so the skip stays a real branch."""
    _, metrics = jax.eval_shape(algo.run_unit, state, first_unit)

    def skip(s: Any, unit: jax.Array) -> tuple[Any, Any]:
        return s, jax.tree.map(lambda m: jnp.full(m.shape, jnp.nan, m.dtype), metrics)

    def maybe_run(s: Any, unit: jax.Array) -> tuple[Any, Any]:
        return jax.lax.cond(unit < algo.num_units, algo.run_unit, skip, s, unit)

    return jax.lax.scan(maybe_run, state, first_unit + jnp.arange(units_per_chunk))


def compile_chunk(run: Run, state: Any) -> Callable[[Any, np.int32], tuple[Any, Any]]:
    """jit(vmap(run_chunk)) over the seeds, compiled once: every chunk has that one shape.
    The state is not donated: on XLA CPU that made the chunks slower (docs/benchmarks.md)."""
    shardings = jax.tree.map(lambda x: x.sharding, state)
    replicated, by_seed = NamedSharding(run.mesh, P()), NamedSharding(run.mesh, P("seeds"))
    start, per_seed = time.perf_counter(), functools.partial(run_chunk, run.algo, run.units_per_chunk)
    jit = {"in_shardings": (shardings, replicated), "out_shardings": (shardings, by_seed)}
    level = run.algo.chunk_cpu_opt_level if jax.default_backend() == "cpu" else None
    compiled = seeds_program(per_seed, (state, np.int32(0)), (0, None), level, **jit)
    seconds, steps = time.perf_counter() - start, run.units_per_chunk * run.algo.steps_per_unit
    where = f"{len(run.seeds)} seed(s) on {run.mesh.size} device(s)"
    if jax.process_index() == 0:
        print(f"compiled one chunk ({steps:,} env steps per seed, {where}) in {seconds:.1f}s", flush=True)
    return compiled


def compile_evaluate(run: Run, state: Any) -> Callable[[Any, np.ndarray], EvalResult]:
    """(state, keys [slots, 2]) -> every seed's final deterministic evaluation, leaves [slots, ...]."""
    algo = run.algo

    def evaluate(state_of_seed: Any, key: jax.Array) -> EvalResult:
        return evaluate_episodes(algo, run.args.eval_episodes, algo.model(state_of_seed), key)

    return seeds_program(evaluate, (state, seed_keys(run)), level=RUNS_ONCE)


# --- The driver: chunks, and the outputs written between them -------------------------


@contextlib.contextmanager
def stop_signals_caught() -> Iterator[list[int]]:
    """Inside, Ctrl-C and SIGTERM are remembered, not raised: the driver finishes the chunk in
    flight, checkpoints and exits. Yields the list of the signals received."""
    received: list[int] = []

    def remember(signum: int, _frame: Any) -> None:
        received.append(signum)
        print(f"\nreceived signal {signum}: finishing the current chunk, then checkpointing", flush=True)

    previous = {s: signal.signal(s, remember) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def train_chunks(run: Run, chunk: Callable, state: Any, units_done: int, stop: list[int]) -> tuple[Any, list]:
    """The remaining chunks. While one runs, the driver writes out the one before: the
    non-finite check, the logs, the checkpoints, a progress line, and a clean exit if a stop
    signal came (then the chunk in flight is dropped: a resume runs it again)."""
    algo, steps_per_unit, main_process = run.algo, run.algo.steps_per_unit, jax.process_index() == 0
    loggers = [RunLogger(d, run.args, units_done * steps_per_unit) for d in run.dirs] if main_process else []
    start, steps_at_start = time.perf_counter(), units_done * steps_per_unit
    first_chunk, ready = units_done // run.units_per_chunk, start
    in_flight = chunk(state, np.int32(first_chunk * run.units_per_chunk))
    for index in range(first_chunk, run.num_chunks):
        state, metrics = in_flight
        first = index * run.units_per_chunk
        if index + 1 < run.num_chunks:  # JAX dispatches asynchronously: this returns at once
            in_flight = chunk(state, np.int32(first + run.units_per_chunk))
        num_valid = min(run.units_per_chunk, algo.num_units - first)
        # [S, U]: the real seeds (not the padding), the units that ran
        metrics = jax.tree.map(lambda x: x[: len(run.seeds), :num_valid], to_host(metrics))  # noqa: B023
        sps = num_valid * steps_per_unit / (time.perf_counter() - ready)  # per seed
        ready = time.perf_counter()
        host_state, step = to_host(state), (first + num_valid) * steps_per_unit
        if not all(np.isfinite(x).all() for x in jax.tree.leaves(algo.model(host_state))):
            where = f"between steps {first * steps_per_unit:,} and {step:,}"
            kept = f"The last good checkpoint is in {run.dirs[0] / 'checkpoints'}"
            sys.exit(f"error: non-finite loss or parameters {where}; stopping. {kept}")
        for i, logger in enumerate(loggers):
            columns = {
                tag: getattr(metrics, name)[i].astype(float).tolist()
                for name, tag in algo.metric_tags.items()
            }
            for u in range(num_valid):
                values = {tag: column[u] for tag, column in columns.items()}  # Python floats
                rate = {"charts/SPS": sps} if u == num_valid - 1 else {}  # once per chunk
                logger.log((first + u + 1) * steps_per_unit, values | rate)
            logger.flush()
            save_checkpoint(run.dirs[i], first + num_valid, step, seed_slice(host_state, i))
        elapsed, total = time.perf_counter() - start, algo.num_units * steps_per_unit
        recent = metrics.episodic_return[:, -max(1, num_valid // 4) :]  # [S, U/4]: the chunk's last quarter
        latest = np.nanmean(recent) if np.isfinite(recent).any() else float("nan")
        if main_process:
            bar, rate = "#" * int(20 * step / total), (step - steps_at_start) / elapsed
            line = f"[{bar:-<20}] {step:>10,}/{total:,} steps | {rate:,.0f} SPS | return {latest:8.2f}"
            print(f"{line} | {elapsed:6.1f}s", flush=True)
        stopping = bool(stop)
        if jax.process_count() > 1:  # a signal to any process stops all of them together
            stopping = bool(multihost_utils.process_allgather(np.int32(stopping)).any())
        if stopping and index < run.num_chunks - 1:
            for logger in loggers:
                logger.close()
            if main_process:
                command = f"python {sys.argv[0]} --resume {run.dirs[0]}"
                print(f"stopped at step {step:,}; checkpoint saved. Continue with: {command}")
            sys.exit(128 + (stop[0] if stop else signal.SIGTERM))
    if main_process:
        steps, seconds = algo.num_units * steps_per_unit - steps_at_start, time.perf_counter() - start
        rate = f"{steps / seconds:,.0f} SPS per seed"
        print(f"trained {steps:,} steps x {len(run.seeds)} seed(s) in {seconds:.2f}s ({rate})")
    return state, loggers


# --- Logging --------------------------------------------------------------------------


class RunLogger:
    """One run directory's metrics: TensorBoard events, metrics.jsonl and, with --track, wandb."""

    def __init__(self, run_dir: Path, args: Args, resumed_at_step: int):
        jsonl = run_dir / "metrics.jsonl"
        if jsonl.exists():  # resumed: drop what the run logged after its checkpoint
            lines = jsonl.read_text().splitlines(keepends=True)
            jsonl.write_text("".join(x for x in lines if json.loads(x)["global_step"] <= resumed_at_step))
        # purge_step: TensorBoard hides the events written after the checkpoint, as above
        self.writer = SummaryWriter(str(run_dir), purge_step=resumed_at_step + 1 if resumed_at_step else None)
        self.jsonl = open(jsonl, "a")  # noqa: SIM115 (open for the whole run)
        self.wandb_run = None
        if args.track:
            import wandb

            record = json.loads((run_dir / "args.json").read_text())
            self.wandb_run = wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                name=record["run_name"],
                id=record["run_name"],
                resume="allow",
                dir=str(run_dir),
                config=record,
                reinit="create_new",
            )

    def log(self, global_step: int, values: dict[str, float]) -> None:
        values = {tag: v for tag, v in values.items() if math.isfinite(v)}  # NaN: nothing to report
        if not values:
            return
        # One event holds the step's values: add_scalar's event per value costs ~10x more
        # (docs/benchmarks.md), a second per 1,000 logged points of PPO.
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()])
        self.writer.file_writer.add_summary(summary, global_step)
        self.jsonl.write(json.dumps({"global_step": global_step, **values}) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({**values, "global_step": global_step})

    def flush(self) -> None:
        self.writer.flush()
        self.jsonl.flush()

    def close(self) -> None:
        self.writer.close()
        self.jsonl.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


# --- Evaluation and the outputs of a finished run -------------------------------------


class EvalResult(NamedTuple):
    returns: jax.Array  # [E] the return of each evaluation episode
    lengths: jax.Array  # [E]
    first_episode: Any  # gymnax EnvState [T_max]: episode 0's states, for the video


class EvalCarry(NamedTuple):
    env_state: Any  # [E]
    obs: jax.Array  # [E, *obs_shape]
    returns: jax.Array  # [E]
    lengths: jax.Array  # [E]
    running: jax.Array  # [E] bool: the episode has not ended yet
    key: jax.Array


def evaluate_episodes(algo: Algorithm, num_episodes: int, model: Any, key: jax.Array) -> EvalResult:
    """num_episodes episodes in parallel with the deterministic policy algo.act, each to its end."""
    env, env_params = algo.env, algo.env_params
    reset_key, key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, num_episodes), env_params
    )
    zeros = jnp.zeros(num_episodes)
    carry = EvalCarry(env_state, obs, zeros, zeros.astype(jnp.int32), jnp.ones(num_episodes, bool), key)

    def step(c: EvalCarry, _: None) -> tuple[EvalCarry, Any]:
        key, step_key = jax.random.split(c.key)
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, num_episodes), c.env_state, algo.act(model, c.obs), env_params
        )
        running = c.running & ~(terminated | truncated)
        carry = EvalCarry(env_state, obs, c.returns + reward * c.running, c.lengths + c.running, running, key)
        return carry, jax.tree.map(lambda x: x[0], c.env_state)

    carry, first_episode = jax.lax.scan(step, carry, None, env_params.max_steps_in_episode)
    return EvalResult(carry.returns, carry.lengths, first_episode)


def eval_summary(returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    returns = np.asarray(returns, np.float64)
    return {
        "returns": returns.tolist(),
        "lengths": np.asarray(lengths).tolist(),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "episodes": len(returns),
    }


def finish_run(run: Run, state: Any, loggers: list[RunLogger], evaluate: Callable) -> None:
    """The final deterministic evaluation of every seed in one program (compile_evaluate's); then
    each seed's eval.json, learning curve and, on request, model file and video."""
    algo, args = run.algo, run.args
    keys = np.asarray(jax.vmap(jax.random.fold_in, (0, None))(seed_keys(run), 1))  # not the training's
    result = to_host(evaluate(state, keys))
    models = to_host(jax.vmap(algo.model)(state)) if args.save_model else None
    for i, (run_dir, seed, logger) in enumerate(zip(run.dirs, run.seeds, loggers, strict=False)):
        summary = eval_summary(result.returns[i], result.lengths[i]) | {
            "global_step": algo.num_units * algo.steps_per_unit
        }
        (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
        logger.log(summary["global_step"], {"eval/episodic_return": summary["mean"]})
        logger.close()
        plot_returns(run_dir, f"{algo.name} on {args.env_id}, seed {seed}")
        if models is not None:
            (run_dir / f"{args.exp_name}.flax").write_bytes(
                flax.serialization.to_bytes(seed_slice(models, i))
            )
        if args.capture_video:
            frames = render_frames(
                algo, args.env_id, seed_slice(result.first_episode, i), summary["lengths"][0]
            )
            write_gif(run_dir / "videos" / "eval.gif", frames)
        mean, std = summary["mean"], summary["std"]
        print(f"{run_dir}: eval return {mean:.2f} +- {std:.2f} over {args.eval_episodes} episodes")


def evaluate_saved_model(run_dir: str | Path, episodes: int = 32, seed: int = 0) -> dict[str, Any]:
    """Load {run_dir}/{exp_name}.flax (written by --save-model) and evaluate it deterministically.

    >>> evaluate_saved_model("runs/CartPole-v1__my_experiment__1__1700000000")["mean"]
    """
    args = args_from_json(Path(run_dir) / "args.json")
    algo = make_algorithm(args)
    template = algo.model(jax.eval_shape(algo.init, jax.random.PRNGKey(0)))
    model = flax.serialization.from_bytes(template, (Path(run_dir) / f"{args.exp_name}.flax").read_bytes())
    result = jax.jit(functools.partial(evaluate_episodes, algo, episodes))(model, jax.random.PRNGKey(seed))
    return eval_summary(result.returns, result.lengths)


def plot_returns(run_dir: Path, title: str) -> None:
    """episodic_return.png: the training return against environment steps, from metrics.jsonl."""
    plt = import_pyplot()
    points = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [p for p in points if "charts/episodic_return" in p]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p["global_step"] for p in points], [p["charts/episodic_return"] for p in points])
    ax.set(xlabel="environment steps", ylabel="episodic return (training)", title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(run_dir / "episodic_return.png", dpi=100)
    plt.close(fig)


def import_pyplot() -> types.ModuleType:
    """matplotlib.pyplot, drawing to files (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    return import_module("matplotlib.pyplot")


def render_frames(algo: Algorithm, env_id: str, env_states: Any, length: int) -> list[np.ndarray]:
    """RGB frames [H, W, 3] of one episode from its gymnax states (leading axis: time). MinAtar's
    grid is coloured here (a colour per channel); gymnasium draws classic control, with pygame."""
    states = [jax.tree.map(lambda x, t=t: np.asarray(x[t]), env_states) for t in range(length)]
    if env_id.endswith("MinAtar"):
        import matplotlib

        palette = np.vstack([[0, 0, 0], np.asarray(matplotlib.colormaps["tab10"].colors) * 255]).astype(
            np.uint8
        )
        grids = [np.asarray(algo.env.get_obs(state, algo.env_params)) for state in states]  # [10, 10, C] 0/1
        channels = [np.where(g.any(-1), g.argmax(-1) % 10 + 1, 0) for g in grids]  # [10, 10], 0: empty
        return [np.kron(palette[c], np.ones((24, 24, 1), np.uint8)) for c in channels]
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    import gymnasium
    from gymnax.visualize.vis_gym import get_gym_state, set_gym_params

    gym_env = gymnasium.make(env_id, render_mode="rgb_array")
    gym_env.reset(seed=0)
    set_gym_params(gym_env.unwrapped, env_id, algo.env_params)
    frames = []
    for state in states:
        gym_env.unwrapped.state = get_gym_state(state, env_id)
        if env_id == "Pendulum-v1":  # the torque arrow
            gym_env.unwrapped.last_u = np.asarray(state.last_u, np.float64)
        frames.append(gym_env.render())
    gym_env.close()
    return frames


def write_gif(path: Path, frames: list[np.ndarray], fps: int = 30) -> None:
    """One palette for the whole episode, from a sample of its frames: PIL's default, a palette
    searched per frame, takes ~10x longer (seconds per video)."""
    from PIL import Image

    sample = np.concatenate([frame[::2, ::2] for frame in frames[:: max(1, len(frames) // 16)]])
    palette = Image.fromarray(sample).quantize(255, Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    images = [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)


def main() -> None:
    """Train every seed in compiled chunks, then evaluate each and write its outputs."""
    # Python's garbage collector scans the objects it tracks: the ~300,000 that the imports
    # made, again and again while JAX traces, and at exit (~0.5 s, docs/benchmarks.md). They
    # live until the exit: keep them out of its scans, and at exit everything left.
    gc.freeze()
    atexit.register(gc.freeze)
    args = tyro.cli(Args)
    start_jax(args)
    try:  # every bad input is reported here, in one line, before anything compiles
        run = open_run(resume_args(args))
        units_done, restored = restore_checkpoints(run)
    except ArgsError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        sys.exit(2)
    # Ctrl-C / SIGTERM: finish the chunk, checkpoint, exit. The pool: see below.
    with ThreadPoolExecutor(max_workers=1) as pool, stop_signals_caught() as stop:
        state = initial_state(run, restored)
        chunk = compile_chunk(run, state)
        # What only the outputs need gets ready in a thread while the chunks run (XLA
        # compiles, and runs the chunks, outside Python's lock); leaving `with` waits for it.
        evaluate = pool.submit(compile_evaluate, run, state)
        pool.submit(import_pyplot)  # ~0.5 s
        state, loggers = train_chunks(run, chunk, state, units_done, stop)
    finish_run(run, state, loggers, evaluate.result())


if __name__ == "__main__":
    main()
