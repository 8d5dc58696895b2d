"""What the peer runners share: the flags (spelled like vibe_rl's scripts), the timing lines
the benchmark parses, the loading of PureJaxRL's files, a greedy evaluation, and the run
directory they write, so the harness reads a peer's run exactly like one of ours.

A runner is launched by the harness with the peer's own interpreter (its own venv), e.g.
    VIBE_RL_SB3_PYTHON=/tmp/peers-venv/bin/python python -m benchmark --peers
and imports this file from its own directory. See README.md here for the setup.

The lines every JAX runner prints (what benchmark/run.py and benchmark/speed.py parse):
    compiled <peer> in X.Xs                  jit(...).lower(keys).compile(), nothing run
    repeat i/R: X.XXs                        each timed call of the compiled train
    trained N steps in X.XXs                 the best of those calls; N = steps x seeds
    final training return R (seed s)         the peer's own episode-return log, per seed
    <run dir>: eval return M +- S over E episodes     (common.write_run, one per seed)

This file imports only numpy at the top: the Stable-Baselines3 runner uses it without JAX.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# The flags and their defaults (CleanRL ppo.py's CartPole config, as ppo_jax_scan's).
PPO_FLAGS: dict[str, Any] = {
    "env-id": "CartPole-v1",
    "seed": 1,
    "total-timesteps": 500_000,
    "num-envs": 4,
    "num-steps": 128,
    "update-epochs": 4,
    "num-minibatches": 4,
    "learning-rate": 2.5e-4,
    "clip-coef": 0.2,
    "ent-coef": 0.01,
    "vf-coef": 0.5,
    "max-grad-norm": 0.5,
    "gamma": 0.99,
    "gae-lambda": 0.95,
    "eval-episodes": 32,
    "output-dir": "runs",
    "exp-name": "",
}

# The speed flags of the JAX runners (benchmark/speed.py passes them).
SPEED_FLAGS: dict[str, tuple[int, str]] = {
    "repeats": (1, "time this many calls of the compiled train; report the best"),
    "num-seeds": (1, "train this many seeds (seed, seed+1, ...) in one jit(vmap(train)); 1: no vmap"),
}

# DQN flags spelled like vibe_rl/dqn_jax.py's. Their default None keeps the peer's own
# default config (PureJaxRL dqn.py's); a value given on the command line overrides it.
DQN_FLAGS: dict[str, type] = {
    "total-timesteps": int,
    "num-envs": int,
    "learning-rate": float,
    "buffer-size": int,
    "batch-size": int,
    "gamma": float,
    "tau": float,
    "target-network-frequency": int,
    "start-e": float,
    "end-e": float,
    "exploration-fraction": float,
    "learning-starts": int,
    "train-frequency": int,
}


def add_speed_flags(parser: argparse.ArgumentParser) -> None:
    for name, (default, help_text) in SPEED_FLAGS.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=help_text)


def parse_ppo_args(
    description: str, speed_flags: bool = False, population: bool = False
) -> argparse.Namespace:
    """The PPO flags of vibe_rl/ppo_jax_scan.py that a peer can match, spelled the same (population:
    also --learning-rates, a comma-separated list to train as one population)."""
    parser = argparse.ArgumentParser(description=description)
    for name, default in PPO_FLAGS.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    if population:
        parser.add_argument("--learning-rates", type=str, default="", help="e.g. 1e-4,1e-3")
    if speed_flags:
        add_speed_flags(parser)
    return check_speed_flags(parser, parser.parse_args())


def parse_dqn_args(description: str) -> argparse.Namespace:
    """dqn_jax's DQN flags (None: the peer's own default), the run flags and the speed flags."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--env-id", type=str, default=None, help="default: the peer's own")
    parser.add_argument("--seed", type=int, default=1)
    for name, kind in DQN_FLAGS.items():
        parser.add_argument(f"--{name}", type=kind, default=None, help="default: the peer's own")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--output-dir", type=str, default="runs")
    parser.add_argument("--exp-name", type=str, default="")
    add_speed_flags(parser)
    return check_speed_flags(parser, parser.parse_args())


def check_speed_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    for name in ("repeats", "num_seeds", "eval_episodes"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# ----------------------------------------------------------------------------------------
# PureJaxRL's files, loaded from a checkout and patched in memory
# ----------------------------------------------------------------------------------------

PUREJAXRL_VARIABLE = "VIBE_RL_PUREJAXRL_DIR"


def purejaxrl_file(name: str) -> Path:
    """purejaxrl/<name> in the checkout named by $VIBE_RL_PUREJAXRL_DIR (its root or its
    inner purejaxrl/ folder). Exits with one line when it is not there."""
    root = os.environ.get(PUREJAXRL_VARIABLE)
    if not root:
        sys.exit(f"error: set {PUREJAXRL_VARIABLE} to a PureJaxRL checkout (see benchmark/peers/README.md)")
    for path in (Path(root) / "purejaxrl" / name, Path(root) / name):
        if path.is_file():
            return path
    sys.exit(f"error: {PUREJAXRL_VARIABLE}={root} has no purejaxrl/{name}")


def patched_source(path: Path, substitutions: list[tuple[str, str, int]]) -> str:
    """The file's text with each (old, new, count) applied; `old` must occur exactly `count`
    times, so a change upstream stops the runner instead of silently running other code."""
    text = path.read_text()
    for old, new, count in substitutions:
        found = text.count(old)
        if found != count:
            raise RuntimeError(
                f"{path}: expected {count} occurrence(s) of {old!r}, found {found}: "
                "the upstream file changed, update the runner's substitutions"
            )
        text = text.replace(old, new)
    return text


def load_module(name: str, path: Path, source: str) -> types.ModuleType:
    """Execute `source` as module `name` (registered in sys.modules, as an import would)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def default_config(path: Path) -> dict[str, Any]:
    """The dict literal the file assigns to `config` (in its __main__ block or main()):
    the peer's own default config, read from its file rather than copied here."""
    found = [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Dict)
        and any(isinstance(t, ast.Name) and t.id == "config" for t in node.targets)
    ]
    if len(found) != 1:
        raise RuntimeError(f"{path}: expected one `config = {{...}}` literal, found {len(found)}")
    return ast.literal_eval(found[0])


def override_config(peer: str, config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """config with `values` set; prints every value set and what the peer's file had."""
    new = dict(config)
    changed = []
    for key, value in values.items():
        if key not in config:
            raise RuntimeError(f"{peer}: the default config has no {key}: the upstream file changed")
        new[key] = value
        if value != config[key] or type(value) is not type(config[key]):
            changed.append(f"{key}={value!r} (file: {config[key]!r})")
    print(f"{peer} config: the file's defaults, runner sets: " + (", ".join(changed) or "nothing"))
    return new


# ----------------------------------------------------------------------------------------
# Compile, time, evaluate (JAX imported inside: the SB3 runner has no JAX)
# ----------------------------------------------------------------------------------------


def seed_keys(seed: int, num_seeds: int) -> Any:
    """One key for one seed; for several, keys of seed, seed+1, ... stacked (vibe_rl's way)."""
    import jax
    import jax.numpy as jnp

    if num_seeds == 1:
        return jax.random.PRNGKey(seed)
    return jnp.stack([jax.random.PRNGKey(seed + i) for i in range(num_seeds)])


def compile_train(peer: str, train: Callable, num_seeds: int, keys: Any) -> Callable:
    """jit(train), or jit(vmap(train)) over the seeds, compiled ahead of time; prints the time."""
    import jax

    fn = jax.jit(train if num_seeds == 1 else jax.vmap(train))
    start = time.perf_counter()
    compiled = fn.lower(keys).compile()
    print(f"compiled {peer} in {time.perf_counter() - start:.1f}s", flush=True)
    return compiled


def time_train(compiled: Callable, keys: Any, repeats: int, steps: int) -> Any:
    """Call the compiled train `repeats` times (each printed); print the best as the
    `trained N steps in X.XXs` line (N = env steps of all seeds). Returns the last output."""
    import jax

    times = []
    out = None
    for i in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(keys))
        times.append(time.perf_counter() - start)
        print(f"repeat {i + 1}/{repeats}: {times[-1]:.2f}s", flush=True)
    print(f"trained {steps} steps in {min(times):.2f}s", flush=True)
    return out


def make_greedy_eval(
    act: Callable[..., Any], env: Any, env_params: Any, episodes: int, initial_carry: Any = None
) -> Callable[[Any, Any], tuple[np.ndarray, np.ndarray]]:
    """evaluate(params, key) -> (returns, lengths) of `episodes` deterministic episodes of
    act(params, obs) -> action, run in parallel on a gymnax < 1.0 env (5-value step), each
    stopped at its first done. Compiled once, reused for every seed's params.

    A recurrent policy passes `initial_carry`, its state at an episode's start for one episode
    (e.g. a GRU's zero hidden state); `act` is then act(params, obs, carry) -> (action, carry),
    the carry threaded through each episode's steps."""
    import jax
    import jax.numpy as jnp

    max_steps = int(env_params.max_steps_in_episode)

    def episode(params: Any, key: Any) -> tuple[Any, Any]:
        reset_key, key = jax.random.split(key)
        obs, state = env.reset(reset_key, env_params)

        def step(carry: tuple) -> tuple:
            key, obs, state, done, total, length, policy = carry
            key, step_key = jax.random.split(key)
            if initial_carry is None:
                action = act(params, obs)
            else:
                action, policy = act(params, obs, policy)
            obs, state, reward, done, _ = env.step(step_key, state, action, env_params)
            return key, obs, state, done, total + reward, length + 1, policy

        def running(carry: tuple) -> Any:
            return jnp.logical_and(jnp.logical_not(carry[3]), carry[5] < max_steps)

        init = (key, obs, state, jnp.bool_(False), jnp.float32(0.0), jnp.int32(0), initial_carry)
        *_, total, length, _ = jax.lax.while_loop(running, step, init)
        return total, length

    episodes_fn = jax.jit(jax.vmap(episode, in_axes=(None, 0)))

    def evaluate(params: Any, key: Any) -> tuple[np.ndarray, np.ndarray]:
        returns, lengths = episodes_fn(params, jax.random.split(key, episodes))
        return np.asarray(returns), np.asarray(lengths)

    return evaluate


def seed_slice(tree: Any, num_seeds: int, i: int) -> Any:
    """Seed i's part of a (maybe vmapped) output."""
    import jax

    return tree if num_seeds == 1 else jax.tree.map(lambda x: x[i], tree)


# ----------------------------------------------------------------------------------------
# The run directory
# ----------------------------------------------------------------------------------------


# wrappers.py imports brax and navix at the top, for its Brax/Navix wrapper classes that ppo.py
# and ppo_rnn.py never build (the names are only looked up inside those classes' methods); the
# peers venv has neither package. The runners drop the imports.
WRAPPERS_SUBSTITUTIONS = [
    ("from brax import envs\n", "", 1),
    ("from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper\n", "", 1),
    ("import navix as nx\n", "", 1),
]


def load_purejaxrl_wrappers() -> types.ModuleType:
    """PureJaxRL's wrappers.py, patched, registered as `wrappers` (its scripts do `from wrappers import`)."""
    path = purejaxrl_file("wrappers.py")
    return load_module("wrappers", path, patched_source(path, WRAPPERS_SUBSTITUTIONS))


def final_training_return(info: dict[str, Any]) -> float:
    """The mean return of the episodes that ended in the last update, from PureJaxRL's LogWrapper
    info of every update ([NUM_UPDATES, NUM_STEPS, NUM_ENVS]); NaN when none ended."""
    ended = np.asarray(info["returned_episode"][-1])
    last = np.asarray(info["returned_episode_returns"][-1])[ended]
    return float(last.mean()) if last.size else float("nan")


def write_evaluated_run(
    args: argparse.Namespace, peer: str, evaluate: Callable, policy: Any, seed: int, extra: dict | None = None
) -> Path:
    """One seed's greedy evaluation (make_greedy_eval's; key PRNGKey(10_000 + seed)) into its run dir."""
    import jax  # here: the SB3 runner's venv has no JAX

    returns, lengths = evaluate(policy, jax.random.PRNGKey(10_000 + seed))
    return write_run(args, args.exp_name or peer, returns.tolist(), lengths.tolist(), seed=seed, extra=extra)


def write_run(
    args: argparse.Namespace,
    exp_name: str,
    returns: list[float],
    lengths: list[int],
    seed: int | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """{output_dir}/{env_id}__{exp_name}__{seed}__{unix_time}/ with args.json and eval.json.
    `seed` defaults to args.seed; `extra` (e.g. the peer's config, its final training
    return) is added to eval.json."""
    seed = args.seed if seed is None else seed
    run_dir = Path(args.output_dir) / f"{args.env_id}__{exp_name}__{seed}__{int(time.time())}"
    run_dir.mkdir(parents=True)
    (run_dir / "args.json").write_text(json.dumps({**vars(args), "seed": seed}, indent=2))
    summary: dict[str, Any] = {
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in lengths],
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "episodes": len(returns),
        "global_step": args.total_timesteps,
        **(extra or {}),
    }
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    print(
        f"{run_dir}: eval return {summary['mean']:.2f} +- {summary['std']:.2f} over {len(returns)} episodes"
    )
    return run_dir
