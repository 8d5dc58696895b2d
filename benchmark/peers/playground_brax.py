"""MuJoCo Playground's DeepMind Control Suite tasks, trained as Playground trains them (Brax's trainers).

    python benchmark/peers/playground_brax.py --algo ppo --env-id playground/CheetahRun \
        --total-timesteps 60000000 --num-seeds 3
    python benchmark/peers/playground_brax.py --algo sac --env-id playground/CartpoleBalance \
        --total-timesteps 100000

It runs in the project's own venv with MuJoCo Playground installed (the optional extra
`playground`: `pip install playground==0.2.0`, imported as mujoco_playground; it works with the
project's brax 0.14.2, mujoco 4.0.0 and mujoco-mjx 3.17.0, and pulls in warp-lang, the tasks'
default backend). Each seed is one call of Brax's ppo.train / sac.train
(brax.training.agents.ppo.train, sac.train) made the way Playground's own training path makes it
(learning/train_jax_ppo.py and the dm_control_suite notebook in github.com/google-deepmind/
mujoco_playground):
  - environment: the unwrapped task, from `registry.load(name, ...)`;
  - wrap_env_fn=mujoco_playground.wrapper.wrap_for_brax_training: Brax's VmapWrapper and
    EpisodeWrapper, then Playground's BraxAutoResetWrapper, which resets a finished env to its own
    cached first state;
  - network_factory=functools.partial(make_ppo_networks or make_sac_networks,
    **config.network_factory) where the config has one, else the function itself;
  - the config's other values as train()'s keyword arguments.
Everything else is brax_train.py's (imported from it): the flags, the budget rounding, the
device_put_replicated shim, the timing, the output lines and the run directory; its docstring says
what each one does.

Env: `registry.load(name, config_overrides={"impl": "jax"})`, MJX's JAX implementation. The tasks'
default impl is "warp" (MuJoCo Warp), far slower on a CPU: CartpoleBalance, 256 envs stepped 100
times in one jitted scan, 2-core CPU: 224k env steps/s with "jax", 13k with "warp" (17x), after a
minute of compiling Warp's kernels. Only the DeepMind Control Suite tasks
(mujoco_playground.dm_control_suite.ALL_ENVS) are taken: --env-id playground/<name>; any other id
is refused in one line. Brax evaluates on the same environment object, wrapped by the same
wrap_env_fn (Playground's script passes eval_env, a second registry.load of the same config).

Hyperparameters. Without flags a task gets Playground's published config for it:
mujoco_playground.config.dm_control_suite_params.brax_ppo_config(name) / brax_sac_config(name),
called here, so the values are read from the installed package, not copied. The runner prints the
whole config, then every value it sets ("runner sets: key=new (config: old)"):
  - num_timesteps: --total-timesteps (default: the config's);
  - num_evals: from --eval-points, as brax_train.py (the config's is 10: 9 epochs + step 0);
  - deterministic_eval=True and num_eval_envs=--eval-episodes (32): Brax's defaults are sampled
    actions and 128 envs (Playground's script keeps them);
  - any flag given, spelled as brax_train.py spells them (--num-envs, --batch-size, --learning-rate,
    --num-steps for PPO's unroll_length, ...; see its docstring), and --num-resets-per-eval (PPO's
    num_resets_per_eval, Brax only).
  - SAC: the config's num_resets_per_eval=10 is dropped: Brax 0.14.2's sac.train has no such
    keyword (passing it raises TypeError). Any other config key train() lacks would be dropped too,
    and said so.
The configs, playground 0.2.0 (dm_control_suite_params.py). PPO is the same for every task but
AcrobotSwingup*, BallInCup, Swimmer*, WalkerRun, FingerSpin (PendulumSwingup: see below), so
CartpoleBalance, ReacherEasy and CheetahRun all get: num_timesteps 60M, num_envs 2048,
batch_size 1024, num_minibatches 32, unroll_length 30 (983,040 env steps per training step),
num_updates_per_batch 16, discounting 0.995, learning_rate 1e-3, entropy_cost 1e-2,
reward_scaling 10, normalize_observations True, action_repeat 1, episode_length 1000 (the env
config's), num_resets_per_eval 10, num_evals 10; no network_factory, so Brax's make_ppo_networks
defaults: policy 4 x 32, value 5 x 256, silu, tanh-normal policy. Brax's defaults for the rest:
clipping_epsilon 0.3, gae_lambda 0.95, vf_loss_coefficient 0.5, no max_grad_norm. SAC, every task:
num_envs 128, batch_size 512, grad_updates_per_step 8, discounting 0.99, learning_rate 1e-3,
reward_scaling 1, normalize_observations True, action_repeat 1, episode_length 1000,
max_replay_size 4,194,304, min_replay_size 8192, network_factory q_network_layer_norm=True
(Brax's make_sac_networks otherwise: 2 x 256 for the policy and each of the 2 Q networks, relu),
num_evals 10; num_timesteps 5M (CartpoleBalance, ReacherEasy), 10M (CheetahRun, Acrobot*, Swimmer*,
Finger*, Hopper*, HumanoidWalk, WalkerRun). Brax's defaults for the rest: tau 0.005.

Playground's pendulum name bug. dm_control_suite_params.py keys its pendulum special cases by
"PendulumSwingUp" (capital U), a name the registry does not have: the task is "PendulumSwingup"
(dm_control_suite/__init__.py). brax_ppo_config: line 56 `elif env_name == "PendulumSwingUp":`
(action_repeat 4, num_updates_per_batch 4); brax_sac_config: line 137 `if env_name ==
"PendulumSwingUp":` (action_repeat 4) and line 146, "PendulumSwingUp" in the tuple of tasks given
10M steps. None of them ever matches: PendulumSwingup gets the generic config (action_repeat 1,
num_updates_per_batch 16, SAC 5M steps), and "PendulumSwingUp" itself makes both functions raise
ValueError at their first line (get_default_config(env_name), line 26 / 115). The runner takes
Playground's config as it is (what Playground's own scripts run); give --action-repeat 4
(--update-epochs 4 for PPO) for the values the special case meant.

Budget. As brax_train.py: Brax trains whole training steps (PPO) or actor steps (SAC) per epoch,
rounding up; the runner picks the epochs (from --eval-points down to half of it) that overshoot
least and says how many steps Brax will train. For PPO a Playground epoch is num_resets_per_eval
(10) rounds of whole training steps, each round ended by resetting every env to a fresh random
start (Brax's reset_fn), so the smallest PPO run at the published config is 10 x 983,040 = 9.8M
steps; a small budget needs smaller --num-envs / --batch-size / --num-minibatches / --num-steps or
--num-resets-per-eval. SAC fills min_replay_size (8192, 64 actor steps of 128 envs) first, counted
in the budget.

MUJOCO_LOG.TXT. CheetahRun's model uses the compiler attribute `settotalmass`, which MuJoCo 4 warns
is deprecated; MuJoCo's default warning handler prints it and appends it to MUJOCO_LOG.TXT in the
working directory. The runner sets its own handler (mujoco.set_mju_user_warning) before any model
is loaded: each distinct warning goes to stderr once, prefixed "MuJoCo warning:", and no file is
written.

Output: brax_train.py's lines, with the label playground_<algo>: `compiled playground_ppo (seed s) in
X.Xs`, `seed s: compile C.Cs, evaluations E.Es, training T.Ts, N steps/s in training`, `seed s: wall
X.Xs, eval return R` (Brax's Evaluator, deterministic, episodes of the full episode_length 1000),
the run directory's `<dir>: eval return M +- S over E episodes`, then `trained N steps in X.XXs`
and `process wall X.Xs`. Run directories: {output_dir}/playground-<name>__playground_<algo>__<seed>__
<unix time>/ with args.json and eval.json as brax_train.py writes them; eval.json's peer_config adds
network_factory (the function and its keyword arguments), wrap_env_fn and the env's load call.
"""

# ruff: noqa: E402  (the clock starts before the imports)
from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the imports: the process wall time includes them

import argparse
import contextlib
import functools
import importlib.metadata
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import mujoco

sys.path.insert(0, str(Path(__file__).resolve().parent))  # brax_train.py, when imported from elsewhere
from brax_train import (
    TRAINERS,
    apply_flags,
    check_args,
    effective_config,
    make_parser,
    plan_run,
    run_seeds,
    set_up_jax,
)

with contextlib.redirect_stdout(None):  # as brax_train.py: mujoco may print that warp is missing
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.sac import networks as sac_networks
    from mujoco_playground import dm_control_suite, registry, wrapper
    from mujoco_playground.config import dm_control_suite_params

PREFIX = "playground/"
PLAYGROUND_VERSION = importlib.metadata.version("playground")  # the PyPI name of mujoco_playground
ENV_OVERRIDES = {"impl": "jax"}  # MJX's JAX implementation; the tasks' default, "warp", is 17x slower on CPU
CONFIGS: dict[str, Callable[[str], Any]] = {
    "ppo": dm_control_suite_params.brax_ppo_config,
    "sac": dm_control_suite_params.brax_sac_config,
}
NETWORKS: dict[str, Callable[..., Any]] = {
    "ppo": ppo_networks.make_ppo_networks,
    "sac": sac_networks.make_sac_networks,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser(f"{PREFIX}CartpoleBalance", f"{PREFIX}<name>, a DeepMind Control Suite task")
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--num-resets-per-eval", type=int, default=None, help="Brax's num_resets_per_eval")
    args = parser.parse_args(argv)
    check_args(parser, args)
    if args.algo != "ppo" and args.num_resets_per_eval is not None:
        parser.error(f"--num-resets-per-eval is not a flag of --algo {args.algo}")
    name = args.env_id.removeprefix(PREFIX)
    if not args.env_id.startswith(PREFIX) or name not in dm_control_suite.ALL_ENVS:
        names = ", ".join(sorted(dm_control_suite.ALL_ENVS))
        raise SystemExit(f"error: --env-id must be {PREFIX}<name>, one of: {names}")
    args.exp_name = args.exp_name or f"playground_{args.algo}"
    return args


def playground_config(algo: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Playground's published config for the task: train()'s keyword arguments, and apart from
    them the keyword arguments of the network factory (its network_factory entry, if any)."""
    config = CONFIGS[algo](name).to_dict()
    return config, config.pop("network_factory", {})


def make_config(args: argparse.Namespace, name: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """train()'s keyword arguments (Playground's config with the flags given; less environment,
    seed, num_evals, progress_fn and the network factory), the network factory's keyword
    arguments, and the lines that say what was published and what the runner sets."""
    published, network = playground_config(args.algo, name)
    source = f"dm_control_suite_params.brax_{args.algo}_config({name!r}), playground {PLAYGROUND_VERSION}"
    lines = [f"Playground's config ({source}): " + ", ".join(f"{k}={v!r}" for k, v in published.items())]
    del published["num_evals"]  # the runner's, from --eval-points
    accepted = inspect.signature(TRAINERS[args.algo]).parameters
    for key in [key for key in published if key not in accepted]:
        value = published.pop(key)
        lines.append(f"dropped: {key}={value!r} (Brax's {args.algo}.train has no such keyword)")
    more = {"num_resets_per_eval": args.num_resets_per_eval} if args.algo == "ppo" else {}
    config, changed = apply_flags(args, published, more)
    lines.append(describe_network(args.algo, network))
    line = f"playground_{args.algo} config for {PREFIX}{name}: Playground's config, runner sets: "
    return config, network, [*lines, line + ", ".join(changed)]


def describe_network(algo: str, network: dict[str, Any]) -> str:
    """The network factory called, with the values Playground sets and Brax's defaults for the rest."""
    factory = NETWORKS[algo]
    shown = (bool, int, float, str, tuple, type(None))
    defaults = {}
    for p in inspect.signature(factory).parameters.values():
        if p.name == "activation":  # a function: its name
            defaults[p.name] = getattr(p.default, "__name__", p.default)
        elif p.default is not inspect.Parameter.empty and isinstance(p.default, shown):
            defaults[p.name] = p.default
    given = ", ".join(f"{k}={v!r}" for k, v in network.items()) or "nothing"
    rest = ", ".join(f"{k}={v!r}" for k, v in defaults.items() if k not in network)
    return f"network: {qualified_name(factory)}, the config sets {given}; Brax's defaults: {rest}"


def qualified_name(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__name__}"


def send_mujoco_warnings_to_stderr() -> None:
    """MuJoCo's warnings, each distinct one once, to stderr only: its default handler also appends
    them to MUJOCO_LOG.TXT in the working directory (CheetahRun's deprecated settotalmass)."""
    seen: set[str] = set()

    def warn(message: str) -> None:
        if message not in seen:
            seen.add(message)
            print(f"MuJoCo warning: {message}", file=sys.stderr, flush=True)

    mujoco.set_mju_user_warning(warn)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    name = args.env_id.removeprefix(PREFIX)
    config, network, lines = make_config(args, name)
    print("\n".join(lines[:-1]), flush=True)
    plan_run(args, config, lines[-1])
    if args.algo == "ppo":
        args.num_resets_per_eval = config.get("num_resets_per_eval", 0)  # args.json: the value run
    set_up_jax(args)
    send_mujoco_warnings_to_stderr()
    env = registry.load(name, config_overrides=ENV_OVERRIDES)
    print(
        f"env: registry.load({name!r}, config_overrides={ENV_OVERRIDES}): impl {env.mjx_model.impl.value}, "
        f"ctrl_dt {env.dt}, sim_dt {env.sim_dt}",
        flush=True,
    )
    print(f"devices: {jax.local_device_count()} x {jax.devices()[0].platform}", flush=True)
    factory = NETWORKS[args.algo]
    recorded = effective_config(args.algo, config) | {
        "network_factory": {"function": qualified_name(factory), "kwargs": network},
        "wrap_env_fn": "mujoco_playground.wrapper.wrap_for_brax_training",  # its __module__ is _src.wrapper
        "environment": f"mujoco_playground.registry.load({name!r}, config_overrides={ENV_OVERRIDES})",
    }
    run_seeds(
        args,
        env,
        config,
        f"playground_{args.algo}",
        recorded,
        wrap_env_fn=wrapper.wrap_for_brax_training,
        network_factory=functools.partial(factory, **network) if network else factory,
    )
    print(f"process wall {time.perf_counter() - PROCESS_START:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
