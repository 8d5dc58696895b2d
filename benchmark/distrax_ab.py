"""A/B of the distrax policies against the same policies written out by hand, for PPO and SAC.

Each variant is the script's own make_train, compiled once (AOT); B patches a hand-written
distribution over the distrax one, with the same methods and attributes the script uses.
The compiled programs are timed alternately A, B, A, B, ... (best of --repeats; compile
time not counted); then their results are compared (float noise over a short run: rounding
differences grow chaotically over a long one) and evaluated (32 deterministic episodes).

    python -m benchmark.distrax_ab ppo --repeats 5
    python -m benchmark.distrax_ab sac --total-timesteps 10000 --learning-starts 1000 --repeats 3
"""

from __future__ import annotations

import argparse
import functools
import time
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vibe_rl import ppo_jax_scan as ppo
from vibe_rl import sac_jax as sac

# --- PPO: Categorical and diagonal Gaussian, as ppo_jax_scan.py wrote them before distrax ---


class Categorical(NamedTuple):
    logits: jax.Array  # [..., K]

    def log_prob(self, action: jax.Array) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)


class MultivariateNormalDiag(NamedTuple):
    loc: jax.Array  # [..., A]
    scale_diag: jax.Array  # [..., A]

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.loc) / self.scale_diag
        return jnp.sum(-0.5 * z**2 - jnp.log(self.scale_diag) - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(jnp.log(self.scale_diag) + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1)

    def mode(self) -> jax.Array:
        return self.loc


HAND_WRITTEN_PPO = types.SimpleNamespace(
    Categorical=lambda logits: Categorical(logits), MultivariateNormalDiag=MultivariateNormalDiag
)


def ppo_ab(options: argparse.Namespace) -> None:
    distrax_module = ppo.distrax
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        args = ppo.Args(env_id=env_id, total_timesteps=options.ppo_timesteps)

        def compiled(module, args=args):
            ppo.distrax = module  # Actor looks the classes up when it is traced
            try:
                return jax.jit(ppo.make_train(args)).lower(jax.random.PRNGKey(1)).compile()
            finally:
                ppo.distrax = distrax_module

        programs = {"A distrax": compiled(distrax_module), "B hand-written": compiled(HAND_WRITTEN_PPO)}
        times, results = {name: [] for name in programs}, {}
        for _ in range(options.repeats):
            for name, program in programs.items():
                start = time.perf_counter()
                results[name] = jax.block_until_ready(program(jax.random.PRNGKey(1)))
                times[name].append(time.perf_counter() - start)
        for name in programs:
            print(
                f"{env_id} {name:15s} best {min(times[name]):.3f}s  all {[round(t, 3) for t in times[name]]}"
            )
        ratio = min(times["A distrax"]) / min(times["B hand-written"])
        print(f"{env_id} A / B time: {ratio:.4f}  (criterion: <= 1.03)")
        (a, ma), (b, mb) = results["A distrax"], results["B hand-written"]
        gap = [
            float(jnp.max(jnp.abs(x - y)))
            for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True)
        ]
        first = np.abs(np.asarray(ma.value_loss) - np.asarray(mb.value_loss))
        early = [f"{first[k]:.1e}" for k in (0, 9, 99)]
        print(f"{env_id} value_loss |A - B| at iterations 1, 10, 100: {early}")
        print(f"{env_id} final parameters: max |A - B| {max(gap):.1e}")


# --- SAC: the tanh-squashed Gaussian, as sac_jax.py wrote it before distrax -------------


class HandWritten(NamedTuple):
    mean: jax.Array
    log_std: jax.Array
    scale: np.ndarray
    bias: np.ndarray

    def sample_and_log_prob(self, seed):
        x = self.mean + jnp.exp(self.log_std) * jax.random.normal(seed, self.mean.shape)
        gaussian = (
            -0.5 * ((x - self.mean) * jnp.exp(-self.log_std)) ** 2 - self.log_std - 0.5 * jnp.log(2 * jnp.pi)
        )
        log_one_minus_tanh_sq = 2.0 * (jnp.log(2.0) - x - jax.nn.softplus(-2.0 * x))
        log_prob = jnp.sum(gaussian - jnp.log(self.scale) - log_one_minus_tanh_sq, axis=-1)
        return self.scale * jnp.tanh(x) + self.bias, log_prob

    def sample(self, seed):
        return self.sample_and_log_prob(seed)[0]


class Reordered(HandWritten):  # B summed in another order: a change of float rounding only
    def sample_and_log_prob(self, seed):
        x = self.mean + jnp.exp(self.log_std) * jax.random.normal(seed, self.mean.shape)
        z, log_scale = (x - self.mean) / jnp.exp(self.log_std), jnp.sum(jnp.log(self.scale))
        log_det = jnp.sum(2.0 * (jnp.log(2.0) - x - jax.nn.softplus(-2.0 * x)), -1)
        log_normal = (
            jnp.sum(-0.5 * z**2, -1) - jnp.sum(self.log_std, -1) - 0.5 * x.shape[-1] * jnp.log(2 * jnp.pi)
        )
        return self.scale * jnp.tanh(x) + self.bias, log_normal - log_scale - log_det


def sac_ab(options: argparse.Namespace) -> None:
    distrax_policy = sac.squashed_gaussian
    variants = {"A distrax": distrax_policy, "B hand-written": HandWritten}

    def compiled_train(policy, args):
        sac.squashed_gaussian = policy  # Actor.__call__ looks it up at trace time
        try:
            return jax.jit(sac.make_train(args)).lower(jax.random.PRNGKey(1)).compile()
        finally:
            sac.squashed_gaussian = distrax_policy

    args = sac.Args(total_timesteps=options.total_timesteps, learning_starts=options.learning_starts)
    print(
        jax.devices(), "|", args.env_id, args.total_timesteps, "steps, learning_starts", args.learning_starts
    )
    programs = {name: compiled_train(policy, args) for name, policy in variants.items()}
    times, results = {name: [] for name in variants}, {}
    for _ in range(options.repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            results[name] = jax.block_until_ready(program(jax.random.PRNGKey(1)))
            times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}
    for name in variants:
        print(f"{name:15s} best {best[name]:.2f}s  all {[round(t, 2) for t in times[name]]}")
    print(f"A / B time: {best['A distrax'] / best['B hand-written']:.4f}  (criterion: <= 1.03)")

    algo = sac.make_algorithm(args)
    for name, (state, metrics) in results.items():
        key = jax.random.fold_in(jax.random.PRNGKey(1), 1)
        returns = jax.jit(functools.partial(sac.evaluate_episodes, algo, 32))(algo.model(state), key).returns
        last = float(metrics.qf_loss[-1])
        print(f"{name:15s} eval return {float(returns.mean()):9.2f}   last block qf_loss {last:.4f}")

    # Float noise: a short run with one logged point per iteration, A and B, and B against its
    # reordering (a float-rounding-only change): A-B should be no larger than B-reordered.
    short = sac.Args(
        total_timesteps=options.check_steps, learning_starts=options.learning_starts, log_frequency=1
    )
    policies = {"A": distrax_policy, "B": HandWritten, "reordered B": Reordered}
    losses = {
        name: np.asarray(compiled_train(p, short)(jax.random.PRNGKey(1))[1].qf_loss)
        for name, p in policies.items()
    }
    steps = [k for k in (1, 10, 100, 300, 1000, 3000) if k <= options.check_steps - options.learning_starts]
    for x, y in (("A", "B"), ("reordered B", "B")):
        gap = np.abs(losses[x] - losses[y]) / np.abs(losses[y])
        print(
            f"qf_loss |{x} - {y}| / |{y}| at gradient steps {steps}:",
            [f"{gap[options.learning_starts + k - 1]:.1e}" for k in steps],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=["ppo", "sac"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ppo-timesteps", type=int, default=500_000, help="PPO's budget (CleanRL config)")
    parser.add_argument("--total-timesteps", type=int, default=10_000, help="SAC's budget")
    parser.add_argument("--learning-starts", type=int, default=1_000, help="SAC's")
    parser.add_argument(
        "--check-steps", type=int, default=1_500, help="SAC: budget of the float-noise comparison"
    )
    options = parser.parse_args()
    ppo_ab(options) if options.algo == "ppo" else sac_ab(options)


if __name__ == "__main__":
    main()
