"""Brax's own trainers (brax.training.agents.ppo / sac, train.train) on a Brax task, for the comparison.

    python benchmark/peers/brax_train.py --algo ppo --env-id brax/reacher --total-timesteps 3276800
    python benchmark/peers/brax_train.py --algo sac --env-id brax/hopper --total-timesteps 49152 --num-seeds 3

It runs in the project's own venv (brax 0.14.2 is a project dependency), not in the peers venv.
Each seed is one call of Brax's train function, made the way Brax's training colab makes it:
`envs.get_environment(name)` (the task's default backend, as vibe_rl's `--env-id brax/<name>`),
handed to train(), which wraps it itself (envs.training.wrap: vmap, EpisodeWrapper with
episode_length 1000, AutoResetWrapper) and builds its own Evaluator. The seeds seed .. seed+S-1
run one after another in this process (Brax's trainers train one seed per call); each call
compiles its own programs (Brax builds new closures per call: nothing compiled is reused in
memory; --jax-cache-dir reuses it from disk).

Hyperparameters. Without flags an env gets Brax's published config for it, read off Brax's
training colab (notebooks/training.ipynb in github.com/google/brax; at tag v0.14.2 the notebook
is the one of commit 5294163532ec90eff61be4a73258ed9624e7a9ad, 2026-01-14):
PPO for inverted_pendulum, inverted_double_pendulum, ant, humanoid, reacher, humanoidstandup,
halfcheetah, pusher; SAC for hopper, walker2d. PPO hopper is the colab's config of commit
9d6b7ced2a13da0d074b5e9fbd3aad8311e26997 (2022-06-08), the last before hopper moved to SAC.
Brax's learner.py (brax/training/learner.py) has no per-env values, only flag defaults. An
(algo, env) pair the colab never published (e.g. SAC reacher, PPO walker2d) gets Brax's train()
defaults, which are not tuned for anything (num_envs 1, discounting 0.9, learning_rate 1e-4, ...):
the runner says so in its config line. Every value set is printed.

The flags are spelled as vibe_rl's scripts (ppo_jax_scan.py, sac_jax.py) where one exists;
None keeps the config's value:

    PPO flag            Brax ppo.train                 SAC flag             Brax sac.train
    --num-envs          num_envs                       --num-envs           num_envs
    --num-steps         unroll_length                  --batch-size         batch_size
    --batch-size        batch_size (unrolls per        --buffer-size        max_replay_size
                        minibatch; Brax only)          --learning-starts    min_replay_size (filled
    --num-minibatches   num_minibatches                                     with the policy's actions)
    --update-epochs     num_updates_per_batch          --learning-rate      learning_rate (policy and Q)
    --learning-rate     learning_rate                  --gamma              discounting
    --gamma             discounting                    --tau                tau
    --gae-lambda        gae_lambda                     --grad-updates-per-step  grad_updates_per_step
    --ent-coef          entropy_cost                                        (Brax only)
    --clip-coef         clipping_epsilon
    --vf-coef           vf_loss_coefficient
    --max-grad-norm     max_grad_norm
    both: --normalize-obs / --no-normalize-obs (normalize_observations), and Brax-only
    --reward-scaling (reward_scaling), --action-repeat (action_repeat, counted in Brax's env steps),
    --episode-length (episode_length, 1000).

Brax's PPO step: each of num_envs envs runs batch_size * num_minibatches / num_envs unrolls of
unroll_length steps (GAE is computed within each unroll), the batch_size * num_minibatches
unrolls are shuffled into num_minibatches minibatches, num_updates_per_batch epochs. The same data
per update in ppo_jax_scan is --num-envs N --num-steps (batch_size * num_minibatches / N *
unroll_length), with GAE over the whole rollout.

Budget. --total-timesteps is Brax's num_timesteps (env steps, action_repeat included); Brax trains
whole training steps per evaluation epoch, rounding up, so the runner picks the number of epochs
(from --eval-points down to half of it) that overshoots least, and prints the steps it will train
(`note: ...`) when they differ. N in `trained N steps` is the steps trained (Brax's own count) x seeds.

Evaluation: Brax's own Evaluator, which train() runs after every epoch (and once before training):
--eval-episodes (default 32, Brax's num_eval_envs; Brax's default is 128) parallel episodes of
the full episode_length, deterministic (deterministic_eval=True, the policy's mode, as vibe_rl's
evaluation; Brax's default, and the colab's, is a sampled action). With --eval-points 10
(default) there are 10 epochs, so 11 evaluations (step 0 included); the last is the score
("eval/episode_reward", its "_std" across episodes), and all of them make eval.json's eval_curve.
Brax reports per-episode means and stds only, so eval.json has no per-episode "returns".

Timing (time.perf_counter; JAX's compile events through jax.monitoring):
    compiled brax_<algo> (seed s) in X.Xs   the wall time JAX spent tracing, lowering and compiling
                                            during that seed's call (the union of its
                                            /jax/core/compile/* event spans; nested spans count once)
    seed s: compile C.Cs, evaluations E.Es, training T.Ts, ... steps/s
                                            evaluations: Brax's eval/epoch_eval_time intervals;
                                            training: the call's wall time outside both
    seed s: wall X.Xs, eval return R        the call, from call to return (compilation, Brax's
                                            evaluations and its set-up included: as a user sees it)
    trained N steps in X.XXs                N = steps x seeds, X = the sum of the seeds' training
                                            times (compilation and evaluations excluded, as in
                                            common.py, whose runners time the compiled call alone)
    <run dir>: eval return M +- S over E episodes
    process wall X.Xs                       the whole process, imports included
JAX's persistent compilation cache is off unless --jax-cache-dir names one (vibe_rl's scripts
default to ~/.cache/vibe_rl/jax); with it, the seeds after the first (and later runs of the same
config) load most of their programs from it (a tiny PPO run, 2-core CPU: seed 1 compiled for
48 s, seed 2 for 5.5 s).
Compilation is most of a short run on CPU: the training epoch, the env resets, and Brax's
evaluation unroll twice (JAX 0.10 types an array by its mesh axes: the Evaluator's donated env
state comes from jit(reset) before the first evaluation and from the evaluation after it, so the
second evaluation compiles again; later ones reuse it). A tiny inverted_pendulum PPO run on a
loaded 2-core CPU: 48 s of compilation in a 52-61 s call.

jax.device_put_replicated shim. Brax 0.14.2's trainers call jax.device_put_replicated(x, devices)
(ppo/train.py, sac/train.py, pmap.py) to put the training state on the devices of their pmap: every
leaf of x gets a new leading axis of len(devices), slice i on devices[i]. JAX 0.10 removed the
function (the name raises AttributeError). make_device_put_replicated below does the same with
public API (a NamedSharding over a one-axis mesh of those devices) and
install_device_put_replicated() sets it on the jax module, in this process only, before the first
train call. The mesh axis is named as the trainers' pmap axis ("i"): JAX 0.10 types an array by
its mesh axes, and with another name the first epoch's inputs (from the shim) and the later ones
(from the pmap) differ, so the training epoch compiled twice (+12 s on a tiny PPO run).

Run directory, one per seed: {output_dir}/{env_id with / as -}__{exp_name}__{seed}__{unix_time}/
(e.g. runs/brax-hopper__brax_sac__1__1764000000/) with args.json and eval.json: mean, std,
episodes, global_step (the steps trained), eval_curve [{global_step, mean}], avg_episode_length,
the timings (wall_s, compile_s, eval_s, train_s) and peer_config (train()'s keyword arguments, with
Brax's defaults filled in for every keyword a flag sets). args.json has the values run, under
the flags' names (num_envs, gamma, ...), as our scripts' args.json.
"""

# ruff: noqa: E402  (the clock starts before the imports)
from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the imports: the process wall time includes them

import argparse
import contextlib
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

with contextlib.redirect_stdout(None):  # mujoco prints that its optional warp backend is missing
    from brax import envs
    from brax.training.agents.ppo import train as ppo
    from brax.training.agents.sac import train as sac

TRAINERS = {"ppo": ppo.train, "sac": sac.train}
COLAB = "brax notebooks/training.ipynb"

# Brax's training colab, the keyword arguments of its train_fn entries (see the docstring), less
# what the runner sets itself (environment, progress_fn, num_evals) and seed (--seed).
EVERY_ENTRY = {"episode_length": 1000, "normalize_observations": True, "action_repeat": 1}
PUBLISHED: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("ppo", "inverted_pendulum"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 2_000_000, "reward_scaling": 10, **EVERY_ENTRY, "unroll_length": 5}
        | {"num_minibatches": 32, "num_updates_per_batch": 4, "discounting": 0.97, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-2, "num_envs": 2048, "batch_size": 1024},
    ),
    ("ppo", "inverted_double_pendulum"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 20_000_000, "reward_scaling": 10, **EVERY_ENTRY, "unroll_length": 5}
        | {"num_minibatches": 32, "num_updates_per_batch": 4, "discounting": 0.97, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-2, "num_envs": 2048, "batch_size": 1024},
    ),
    ("ppo", "ant"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 50_000_000, "reward_scaling": 10, **EVERY_ENTRY, "unroll_length": 5}
        | {"num_minibatches": 32, "num_updates_per_batch": 4, "discounting": 0.97, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-2, "num_envs": 4096, "batch_size": 2048},
    ),
    ("ppo", "humanoid"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 50_000_000, "reward_scaling": 0.1, **EVERY_ENTRY, "unroll_length": 10}
        | {"num_minibatches": 32, "num_updates_per_batch": 8, "discounting": 0.97, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-3, "num_envs": 2048, "batch_size": 1024},
    ),
    ("ppo", "reacher"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 50_000_000, "reward_scaling": 5, **EVERY_ENTRY, "action_repeat": 4}
        | {"unroll_length": 50, "num_minibatches": 32, "num_updates_per_batch": 8, "discounting": 0.95}
        | {"learning_rate": 3e-4, "entropy_cost": 1e-3, "num_envs": 2048, "batch_size": 256}
        | {"max_devices_per_host": 8},
    ),
    ("ppo", "humanoidstandup"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 100_000_000, "reward_scaling": 0.1, **EVERY_ENTRY, "unroll_length": 15}
        | {"num_minibatches": 32, "num_updates_per_batch": 8, "discounting": 0.97, "learning_rate": 6e-4}
        | {"entropy_cost": 1e-2, "num_envs": 2048, "batch_size": 1024},
    ),
    ("ppo", "halfcheetah"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 50_000_000, "reward_scaling": 1, **EVERY_ENTRY, "unroll_length": 20}
        | {"num_minibatches": 32, "num_updates_per_batch": 8, "discounting": 0.95, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-3, "num_envs": 2048, "batch_size": 512},
    ),
    ("ppo", "pusher"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 50_000_000, "reward_scaling": 5, **EVERY_ENTRY, "unroll_length": 30}
        | {"num_minibatches": 16, "num_updates_per_batch": 8, "discounting": 0.95, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-2, "num_envs": 2048, "batch_size": 512},
    ),
    ("ppo", "hopper"): (
        f"{COLAB} @ 9d6b7ced (2022-06-08)",
        {"num_timesteps": 60_000_000, "reward_scaling": 10, **EVERY_ENTRY, "unroll_length": 20}
        | {"num_minibatches": 16, "num_updates_per_batch": 4, "discounting": 0.99, "learning_rate": 3e-4}
        | {"entropy_cost": 1e-2, "num_envs": 2048, "batch_size": 1024},
    ),
    ("sac", "hopper"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 6_553_600, "reward_scaling": 30, **EVERY_ENTRY, "discounting": 0.997}
        | {"learning_rate": 6e-4, "num_envs": 128, "batch_size": 512, "grad_updates_per_step": 64}
        | {"max_devices_per_host": 1, "max_replay_size": 1_048_576, "min_replay_size": 8192},
    ),
    ("sac", "walker2d"): (
        f"{COLAB} @ v0.14.2",
        {"num_timesteps": 7_864_320, "reward_scaling": 5, **EVERY_ENTRY, "discounting": 0.997}
        | {"learning_rate": 6e-4, "num_envs": 128, "batch_size": 128, "grad_updates_per_step": 32}
        | {"max_devices_per_host": 1, "max_replay_size": 1_048_576, "min_replay_size": 8192},
    ),
}

# flag (argparse dest) -> (Brax train keyword, type), per algorithm; "both" are common to the two.
BOTH_FLAGS = {
    "num_envs": ("num_envs", int),
    "gamma": ("discounting", float),
    "reward_scaling": ("reward_scaling", float),
    "action_repeat": ("action_repeat", int),
    "episode_length": ("episode_length", int),
}
PPO_FLAGS = {
    "num_steps": ("unroll_length", int),
    "batch_size": ("batch_size", int),
    "num_minibatches": ("num_minibatches", int),
    "update_epochs": ("num_updates_per_batch", int),
    "learning_rate": ("learning_rate", float),
    "gae_lambda": ("gae_lambda", float),
    "ent_coef": ("entropy_cost", float),
    "clip_coef": ("clipping_epsilon", float),
    "vf_coef": ("vf_loss_coefficient", float),
    "max_grad_norm": ("max_grad_norm", float),
}
SAC_FLAGS = {
    "batch_size": ("batch_size", int),
    "buffer_size": ("max_replay_size", int),
    "learning_starts": ("min_replay_size", int),
    "learning_rate": ("learning_rate", float),
    "tau": ("tau", float),
    "grad_updates_per_step": ("grad_updates_per_step", int),
}
ALGO_FLAGS = {"ppo": BOTH_FLAGS | PPO_FLAGS, "sac": BOTH_FLAGS | SAC_FLAGS}


def make_parser(default_env: str, env_help: str) -> argparse.ArgumentParser:
    """The runner's flags, every algorithm's (check_args refuses those of the other one)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=sorted(TRAINERS), default="ppo")
    parser.add_argument("--env-id", type=str, default=default_env, help=env_help)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-seeds", type=int, default=1, help="seeds seed..seed+S-1, one train call each")
    parser.add_argument("--total-timesteps", type=int, default=None, help="default: the config's")
    for dest, (key, kind) in {**ALGO_FLAGS["ppo"], **ALGO_FLAGS["sac"]}.items():
        parser.add_argument(f"--{dest.replace('_', '-')}", type=kind, default=None, help=f"Brax's {key}")
    parser.add_argument("--normalize-obs", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--eval-points", type=int, default=10, help="training epochs, each then evaluated")
    parser.add_argument("--eval-episodes", type=int, default=32, help="Brax's num_eval_envs")
    parser.add_argument("--output-dir", type=str, default="runs")
    parser.add_argument("--exp-name", type=str, default="")
    parser.add_argument(
        "--jax-cache-dir", type=str, default="", help="JAX's persistent compilation cache (off)"
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a flag of the other algorithm, and counts below 1."""
    for dest in set(ALGO_FLAGS["ppo"]) ^ set(ALGO_FLAGS["sac"]):
        if dest not in ALGO_FLAGS[args.algo] and getattr(args, dest) is not None:
            parser.error(f"--{dest.replace('_', '-')} is not a flag of --algo {args.algo}")
    for name in ("num_seeds", "eval_points", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser("brax/inverted_pendulum", "brax/<name>")
    args = parser.parse_args(argv)
    check_args(parser, args)
    if not args.env_id.startswith("brax/") or args.env_id.removeprefix("brax/") not in envs._envs:
        parser.error(f"--env-id must be brax/<name>, one of: {', '.join(sorted(envs._envs))}")
    args.exp_name = args.exp_name or f"brax_{args.algo}"
    return args


# ----------------------------------------------------------------------------------------
# jax.device_put_replicated, removed in JAX 0.10, which Brax 0.14.2's trainers call
# ----------------------------------------------------------------------------------------


def make_device_put_replicated(axis_name: str) -> Callable[[Any, Sequence[Any]], Any]:
    """jax.device_put_replicated(x, devices), as JAX < 0.10 had it: every leaf of x stacked
    len(devices) times along a new leading axis, slice i stored on devices[i] (the layout jax.pmap
    over those devices reads). The arrays lie on a one-axis mesh named `axis_name`: given the
    trainers' pmap axis name, they are typed exactly as the pmapped epoch's outputs, so the epoch
    compiles once, not once for the first epoch's inputs and again for the later ones."""

    def device_put_replicated(x: Any, devices: Sequence[Any]) -> Any:
        devices = list(devices)
        if not devices:
            raise ValueError("device_put_replicated: devices must be a non-empty sequence")
        sharding = NamedSharding(Mesh(np.array(devices), (axis_name,)), PartitionSpec(axis_name))

        def put(leaf: Any) -> jax.Array:
            leaf = jnp.asarray(leaf)
            return jax.device_put(jnp.broadcast_to(leaf[None], (len(devices), *leaf.shape)), sharding)

        return jax.tree.map(put, x)

    return device_put_replicated


def install_device_put_replicated() -> None:
    """Set jax.device_put_replicated (this process only), where JAX has none: Brax 0.14.2's
    trainers and brax.training.pmap call it; both trainers pmap over the axis named "i"."""
    axis_names = {ppo._PMAP_AXIS_NAME, sac._PMAP_AXIS_NAME}
    if len(axis_names) != 1:
        raise RuntimeError(f"Brax's PPO and SAC pmap over different axes {axis_names}: update the shim")
    try:
        jax.device_put_replicated  # noqa: B018  (an older JAX still has it: keep its own)
    except AttributeError:
        jax.device_put_replicated = make_device_put_replicated(axis_names.pop())


# ----------------------------------------------------------------------------------------
# The config and the budget
# ----------------------------------------------------------------------------------------


def make_config(args: argparse.Namespace, name: str) -> tuple[dict[str, Any], str]:
    """train()'s keyword arguments (the published config, or Brax's defaults, with the flags
    given), less environment, seed, num_evals and progress_fn; and the line that says so."""
    source, published = PUBLISHED.get((args.algo, name), (None, {}))
    config, changed = apply_flags(args, published)
    if "num_timesteps" not in config:
        raise SystemExit(f"error: brax/{name} has no published {args.algo} config: give --total-timesteps")
    what = f"Brax's published config ({source})" if source else "no published config: Brax's train defaults"
    line = f"brax_{args.algo} config for brax/{name}: {what}, runner sets: " + ", ".join(changed)
    return config, line


def apply_flags(
    args: argparse.Namespace, published: dict[str, Any], more: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """`published` with the values the flags give (None keeps the config's) and the runner's own
    (deterministic_eval, num_eval_envs; `more`: further train() keywords, None kept); and each
    value that changed, as "key=new (config: old)" or "(default: old)" (train()'s default)."""
    config = dict(published)
    config.setdefault("episode_length", 1000)  # sac.train has no default; ppo.train's is None
    changed = []
    given = {key: getattr(args, dest) for dest, (key, _) in ALGO_FLAGS[args.algo].items()}
    given |= {"normalize_observations": args.normalize_obs, "num_timesteps": args.total_timesteps}
    given |= {"deterministic_eval": True, "num_eval_envs": args.eval_episodes, **(more or {})}
    defaults = train_defaults(args.algo)
    for key, value in given.items():
        if value is None:
            continue
        before = config.get(key, defaults.get(key))
        config[key] = value
        if value != before:
            changed.append(f"{key}={value!r} ({'config' if key in published else 'default'}: {before!r})")
    return config, changed


def train_defaults(algo: str) -> dict[str, Any]:
    import inspect

    parameters = inspect.signature(TRAINERS[algo]).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def plan_epochs(units: int, points: int) -> int:
    """Brax's number of training epochs (num_evals - 1) for `units` training steps (PPO) or actor
    steps (SAC): Brax runs ceil(units / epochs) of them per epoch, so the total rounds up; the
    count between points // 2 and points that overshoots least (the larger on a tie)."""
    if units <= points:
        return max(units, 1)
    return min(range(max(1, points // 2), points + 1), key=lambda e: (e * math.ceil(units / e), -e))


def plan_budget(algo: str, config: dict[str, Any], points: int) -> tuple[int, int]:
    """(epochs, env steps train() will run), as ppo.train / sac.train count them (PPO: an epoch
    is num_resets_per_eval rounds of whole training steps, each round ended by resetting every env)."""
    defaults = train_defaults(algo) | config
    repeat, total = defaults["action_repeat"], config["num_timesteps"]
    if algo == "ppo":
        per_unit = defaults["batch_size"] * defaults["unroll_length"] * defaults["num_minibatches"] * repeat
        per_unit *= max(defaults["num_resets_per_eval"], 1)
        prefill = 0
    else:
        per_unit = defaults["num_envs"] * repeat
        prefill = -(-defaults["min_replay_size"] // defaults["num_envs"]) * per_unit
    units = -(-(total - prefill) // per_unit)
    epochs = plan_epochs(units, points)
    return epochs, prefill + epochs * -(-units // epochs) * per_unit


# ----------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------

COMPILE_SPANS: list[tuple[float, float]] = []  # (start, end) of JAX's compile events, time.time()


def record_compile_span(event: str, start: float, end: float, **kwargs: Any) -> None:
    if event.startswith("/jax/core/compile/"):  # jaxpr trace, lowering to MLIR, backend compile
        COMPILE_SPANS.append((start, end))


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of the spans (nested or overlapping ones count once)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def as_float(x: Any) -> float:
    return float(np.asarray(x))


# ----------------------------------------------------------------------------------------
# One seed
# ----------------------------------------------------------------------------------------


def train_seed(
    args: argparse.Namespace, env: Any, config: dict[str, Any], seed: int, **train_kwargs: Any
) -> dict[str, Any]:
    """One call of Brax's train (config and train_kwargs its keyword arguments); its timings and
    evaluations."""
    curve: list[dict[str, Any]] = []
    eval_spans: list[tuple[float, float]] = []

    def progress(step: int, metrics: dict[str, Any]) -> None:
        now = time.time()
        if "eval/episode_reward" in metrics:
            eval_spans.append((now - as_float(metrics["eval/epoch_eval_time"]), now))
            point = {"global_step": int(step), "mean": as_float(metrics["eval/episode_reward"])}
            point["std"] = as_float(metrics["eval/episode_reward_std"])
            point["avg_episode_length"] = as_float(metrics["eval/avg_episode_length"])
            curve.append(point)
            mean, std, took = point["mean"], point["std"], as_float(metrics["eval/epoch_eval_time"])
            print(
                f"  seed {seed} step {step}: eval return {mean:.2f} +- {std:.2f} "
                f"(at {time.perf_counter() - start:.1f}s; its evaluation {took:.1f}s)",
                flush=True,
            )
        if "training/walltime" in metrics:
            curve[-1]["brax_training_walltime"] = as_float(metrics["training/walltime"])

    del COMPILE_SPANS[:]
    wall_start, start = time.time(), time.perf_counter()
    TRAINERS[args.algo](environment=env, seed=seed, progress_fn=progress, **config, **train_kwargs)
    wall = time.perf_counter() - start
    spans = [(max(a, wall_start), b) for a, b in COMPILE_SPANS if b > wall_start]
    compile_s, eval_s = covered(spans), covered(eval_spans)
    train_s = wall - covered(spans + eval_spans)
    return {"wall": wall, "compile": compile_s, "eval": eval_s, "train": train_s, "curve": curve}


def effective_config(algo: str, config: dict[str, Any]) -> dict[str, Any]:
    """The values train() runs with for every flag's keyword (the defaults filled in), and the rest given."""
    exposed = {key for key, _ in ALGO_FLAGS[algo].values()} | {"normalize_observations", "num_timesteps"}
    return {k: v for k, v in (train_defaults(algo) | config).items() if k in exposed or k in config}


def write_seed_run(args: argparse.Namespace, config: dict[str, Any], seed: int, result: dict) -> Path:
    """The seed's run directory with args.json and eval.json, named as common.write_run names them.
    `config`: train()'s keyword arguments, as effective_config gives them."""
    last = result["curve"][-1]
    run_dir = Path(args.output_dir) / (
        f"{args.env_id.replace('/', '-')}__{args.exp_name}__{seed}__{int(time.time())}"
    )
    run_dir.mkdir(parents=True)
    (run_dir / "args.json").write_text(json.dumps({**vars(args), "seed": seed}, indent=2))
    summary = {
        "mean": last["mean"],
        "std": last["std"],
        "episodes": config["num_eval_envs"],
        "global_step": last["global_step"],
        "avg_episode_length": last["avg_episode_length"],
        "eval_curve": [{"global_step": p["global_step"], "mean": p["mean"]} for p in result["curve"]],
        "deterministic_eval": config["deterministic_eval"],
        "wall_s": result["wall"],
        "compile_s": result["compile"],
        "eval_s": result["eval"],
        "train_s": result["train"],
        "peer_config": config,
    }
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    mean, std, episodes = summary["mean"], summary["std"], summary["episodes"]
    print(f"{run_dir}: eval return {mean:.2f} +- {std:.2f} over {episodes} episodes", flush=True)
    return run_dir


def plan_run(args: argparse.Namespace, config: dict[str, Any], line: str) -> None:
    """Set the values run on args (for args.json, under the flags' names, as our scripts'), pick
    num_evals for --eval-points, and print the config line and the steps Brax will train."""
    effective = effective_config(args.algo, config)
    for dest, (key, _) in ALGO_FLAGS[args.algo].items():
        setattr(args, dest, effective[key])
    args.normalize_obs, args.total_timesteps = effective["normalize_observations"], config["num_timesteps"]
    epochs, steps = plan_budget(args.algo, config, args.eval_points)
    config["num_evals"] = epochs + 1  # one evaluation before training, one after each epoch
    print(f"{line}, num_evals={epochs + 1} ({epochs} epochs + the evaluation at step 0)", flush=True)
    if steps != config["num_timesteps"]:
        print(f"note: Brax trains {steps} steps ({epochs} epochs of whole training steps, rounded up)")


def set_up_jax(args: argparse.Namespace) -> None:
    """The device_put_replicated shim, the persistent cache (--jax-cache-dir), the compile timer."""
    install_device_put_replicated()
    if args.jax_cache_dir:  # as vibe_rl's scripts set it (they default to ~/.cache/vibe_rl/jax)
        jax.config.update("jax_compilation_cache_dir", str(Path(args.jax_cache_dir).expanduser()))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.monitoring.register_event_time_span_listener(record_compile_span)


def run_seeds(
    args: argparse.Namespace,
    env: Any,
    config: dict[str, Any],
    label: str,
    recorded: dict[str, Any] | None = None,
    **train_kwargs: Any,
) -> None:
    """Train the seeds one after another, one train call each, and print their lines (`compiled
    <label> (seed s) in X.Xs`, ...) and `trained N steps in X.XXs`. eval.json's peer_config is
    `recorded` (default: effective_config)."""
    recorded = effective_config(args.algo, config) if recorded is None else recorded
    trained_steps, train_time = 0, 0.0
    for seed in range(args.seed, args.seed + args.num_seeds):
        result = train_seed(args, env, config, seed, **train_kwargs)
        done = result["curve"][-1]["global_step"]
        trained_steps, train_time = trained_steps + done, train_time + result["train"]
        print(f"compiled {label} (seed {seed}) in {result['compile']:.1f}s")
        print(
            f"seed {seed}: compile {result['compile']:.1f}s, evaluations {result['eval']:.1f}s, "
            f"training {result['train']:.1f}s, {done / result['train']:,.0f} steps/s in training"
        )
        print(f"seed {seed}: wall {result['wall']:.1f}s, eval return {result['curve'][-1]['mean']:.2f}")
        write_seed_run(args, recorded, seed, result)
    print(f"trained {trained_steps} steps in {train_time:.2f}s")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    name = args.env_id.removeprefix("brax/")
    config, line = make_config(args, name)
    plan_run(args, config, line)
    set_up_jax(args)
    warnings.filterwarnings("ignore", "Brax System", UserWarning)  # that brax.envs is not developed further
    env = envs.get_environment(name)
    print(f"devices: {jax.local_device_count()} x {jax.devices()[0].platform}", flush=True)
    run_seeds(args, env, config, f"brax_{args.algo}")
    print(f"process wall {time.perf_counter() - PROCESS_START:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
