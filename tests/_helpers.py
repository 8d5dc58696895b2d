"""Helpers shared by the tests: load a script as a module, run it as a user would, read
what a run writes, and small probe environments with a known value function."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from gymnax.environments import environment, spaces

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """The script vibe_rl/{name}.py, imported from the installed package (pip install -e .)."""
    return importlib.import_module(f"vibe_rl.{name}")


def session_cache() -> list[str]:
    """The flag that points a script at the session's compilation cache (conftest.py)."""
    cache = os.environ.get("VIBE_RL_TEST_JAX_CACHE")
    return ["--jax-cache-dir", cache] if cache else []


def subprocess_env(extra_xla_flags: str = "") -> dict[str, str]:
    """The environment of a process a test starts: this one's (with the XLA_FLAGS of
    conftest.py), wandb offline, and extra_xla_flags."""
    flags = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""), extra_xla_flags) if f)
    return {**os.environ, "WANDB_MODE": "offline", "XLA_FLAGS": flags}


def script_command(name: str, *flags: str) -> dict[str, Any]:
    """Popen/run keywords for `python vibe_rl/{name}.py FLAGS` from the repository root."""
    return dict(
        args=[sys.executable, str(ROOT / "vibe_rl" / f"{name}.py"), *flags, *session_cache()],
        cwd=ROOT,
        text=True,
        env=subprocess_env(),
    )


def run_script(
    name: str, *flags: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python vibe_rl/{name}.py FLAGS` from the repository root, as a user would."""
    command = script_command(name, *flags)
    command["env"].update(env or {})
    return subprocess.run(**command, capture_output=True, timeout=timeout)


def run_with_every_output(name: str, flags: list[str], output_dir: Path, env_id: str) -> tuple[Path, str]:
    """A tiny run with every optional output on (--save-model --capture-video --track,
    --exp-name tiny); it must succeed. Returns its run directory and its stdout."""
    extra = ["--save-model", "--capture-video", "--track", "--exp-name", "tiny"]
    result = run_script(name, *flags, "--output-dir", str(output_dir), *extra)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(output_dir)
    assert run_dir.name.startswith(f"{env_id}__tiny__1__")
    return run_dir, result.stdout


def start_script(name: str, *flags: str) -> subprocess.Popen:
    """Start `python vibe_rl/{name}.py FLAGS` in the background, output piped."""
    return subprocess.Popen(**script_command(name, *flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def interrupt_after_compiling(process: subprocess.Popen, signum: int = signal.SIGINT) -> str:
    """Ctrl-C (or another signal) to a started run as soon as it has compiled its chunk. It must
    finish the chunk in flight, checkpoint, print how to resume and exit with 128 + the signal.
    Returns its stdout."""
    for line in process.stdout:
        if line.startswith("compiled"):
            process.send_signal(signum)
            break
    out, err = process.communicate(timeout=300)
    assert process.returncode == 128 + signum, err[-3000:]
    assert "--resume" in out
    return out


def exit_of_main(module: ModuleType, flags: list[str], monkeypatch: Any, capsys: Any) -> tuple[int, str]:
    """Call a script's main() with FLAGS as its command line; (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *flags, *session_cache()])
    with pytest.raises(SystemExit) as exit_info:
        module.main()
    return exit_info.value.code, capsys.readouterr().err


def check_bad_input(module: ModuleType, flags: list[str], message: str, monkeypatch: Any, capsys: Any):
    """Bad input is refused before compiling: exit status 2 and one line that says why."""
    code, err = exit_of_main(module, flags, monkeypatch, capsys)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err


def fake_run_dir(parent: Path, env_id: str, args: Any) -> Path:
    """A run directory with the args.json of `args` and an empty checkpoint: enough for
    --resume's checks of the flags, which come before anything is read or compiled."""
    run_dir = parent / f"{env_id}__x__1__1"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "state.msgpack").write_bytes(b"")
    (run_dir / "args.json").write_text(json.dumps({**asdict(args), "run_seed": 1}))
    return run_dir


def only_run_dir(output_dir: Path) -> Path:
    (run_dir,) = [p for p in output_dir.iterdir() if p.is_dir()]
    return run_dir


def read_events(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of a run's TensorBoard event files, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    return {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_run_dir(run_dir: Path, tags: list[str], total_steps: int, exp_name: str) -> dict[str, Any]:
    """Check every file a run writes (README.md, "What a run writes"); return the parsed eval.json."""
    from PIL import Image

    args = json.loads((run_dir / "args.json").read_text())
    assert args["exp_name"] == exp_name

    points = read_jsonl(run_dir / "metrics.jsonl")
    assert points, "metrics.jsonl is empty"
    steps = [p["global_step"] for p in points]
    assert steps == sorted(steps) and steps[0] > 0 and steps[-1] <= total_steps

    events = read_events(run_dir)
    for tag in tags:
        assert tag in events, f"TensorBoard tag {tag} missing; has {sorted(events)}"
        assert tag in {k for p in points for k in p}, f"{tag} missing from metrics.jsonl"

    with Image.open(run_dir / "episodic_return.png") as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100

    assert (run_dir / "checkpoints" / "state.msgpack").is_file()
    assert not list((run_dir / "checkpoints").glob("*.tmp")), "a temporary checkpoint was left"

    evaluation = json.loads((run_dir / "eval.json").read_text())
    for field in ("returns", "lengths", "mean", "std", "episodes"):
        assert field in evaluation
    assert len(evaluation["returns"]) == len(evaluation["lengths"]) == evaluation["episodes"]
    return evaluation


def check_gif(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as gif:
        assert gif.format == "GIF"
        assert gif.n_frames > 1, "the video has a single frame"


# ------------------------------------------------------------------------------------
# Probe environments (gymnax API): the value function is known in closed form.
# ------------------------------------------------------------------------------------


@struct.dataclass
class ProbeState(environment.EnvState):
    time: int


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 5


class ConstantRewardProbe(environment.Environment):
    """Observation always [1], reward 1 every step, never terminates, truncated by the
    time limit after max_steps_in_episode steps.

    The observation carries no time, so a learner sees one state. Bootstrapping through
    the truncation its value is 1 / (1 - gamma); treating the truncation as a
    termination it would be the average of the shorter geometric sums, which is less.
    """

    def __init__(self, continuous: bool = False):
        super().__init__()
        self.continuous = continuous

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def step_env(self, key, state, action, params):
        state = ProbeState(time=state.time + 1)
        return jnp.ones(1), state, jnp.asarray(1.0), jnp.asarray(False), {}

    def reset_env(self, key, params):
        return jnp.ones(1), ProbeState(time=0)

    def is_terminated(self, state, params):
        return jnp.asarray(False)

    def action_space(self, params=None):
        if self.continuous:
            return spaces.Box(low=-1.0, high=1.0, shape=(1,), dtype=jnp.float32)
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    @property
    def name(self) -> str:
        return "ConstantRewardProbe"


def check_vmapped_init(init: Any, num_seeds: int = 3) -> None:
    """`jax.vmap(init)` over seeds runs every QR (the orthogonal init) unbatched, and gives the
    same bits as initialising one seed at a time. A batched CPU QR in jaxlib 0.10.2 can
    deadlock XLA's intra-op thread pool (see the scripts' init_params)."""
    import re

    keys = jnp.stack([jax.random.PRNGKey(seed) for seed in range(num_seeds)])
    vmapped = jax.jit(jax.vmap(init))
    qr_batch_dims = re.findall(r'geqrf_ffi.*?num_batch_dims = "(\d+)"', vmapped.lower(keys).as_text())
    assert qr_batch_dims and set(qr_batch_dims) == {"0"}, qr_batch_dims
    one_at_a_time = [jax.jit(init)(key) for key in keys]
    assert tree_equal(vmapped(keys), jax.tree.map(lambda *xs: jnp.stack(xs), *one_at_a_time))


def tree_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two pytrees of arrays."""
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        x.shape == y.shape and bool(jnp.all(jnp.asarray(x) == jnp.asarray(y)))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


class CountingProbe(environment.Environment):
    """Observation [t] (the step count in the episode), reward 1 every step.

    With terminate_at=None it only ends by the time limit (truncation) after
    max_steps_in_episode steps; with terminate_at=k it terminates at step k. The final
    observation [t] differs from the reset observation [0], so a test can tell whether a
    learner stored the real final observation or the auto-reset one.
    """

    def __init__(self, terminate_at: int | None = None):
        super().__init__()
        self.terminate_at = terminate_at

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def step_env(self, key, state, action, params):
        state = ProbeState(time=state.time + 1)
        terminated = jnp.asarray(False) if self.terminate_at is None else state.time >= self.terminate_at
        obs = jnp.asarray([state.time], jnp.float32)
        return obs, state, jnp.asarray(1.0), terminated, {}

    def reset_env(self, key, params):
        return jnp.zeros(1), ProbeState(time=0)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (1,), jnp.float32)

    @property
    def name(self) -> str:
        return "CountingProbe"


class AsymmetricBoxProbe(ConstantRewardProbe):
    """ConstantRewardProbe with two continuous action dimensions whose bounds are neither
    symmetric nor centred on 0: [-3, -1] and [0.5, 4]."""

    low = (-3.0, 0.5)
    high = (-1.0, 4.0)

    def __init__(self):
        super().__init__(continuous=True)

    def action_space(self, params=None):
        return spaces.Box(low=jnp.array(self.low), high=jnp.array(self.high), shape=(2,), dtype=jnp.float32)

    @property
    def name(self) -> str:
        return "AsymmetricBoxProbe"


def run_in_chunks(module: ModuleType, algo: Any, key: jax.Array, num_chunks: int) -> tuple[Any, list[Any]]:
    """Train one seed as the CLI does, in compiled chunks planned by the harness (the last one
    may be partly masked): the final state, and each chunk's metrics."""
    per_chunk, chunks = module.plan_chunks(algo.num_iterations, num_chunks)
    chunk = jax.jit(lambda state, first: module.run_chunk(algo, per_chunk, state, first))
    state, metrics = algo.init(key), []
    for c in range(chunks):
        state, chunk_metrics = chunk(state, jnp.int32(c * per_chunk))
        metrics.append(chunk_metrics)
    return state, metrics


def train_setup(module: ModuleType, setup: Any, key: jax.Array) -> tuple[Any, Any]:
    """make_train's train(key) of a script, for a setup already built (e.g. on a probe env)."""
    indices = jnp.arange(setup.sizes.num_iterations)
    step = lambda state, index: module.iteration(setup, state, index)
    return jax.lax.scan(step, module.init_state(setup, key), indices)


def probe_spec(module: ModuleType, env: Any) -> Any:
    """A script's EnvSpec of a probe env (make_env knows only the registered ones)."""
    return module.env_spec(env, env.default_params)
