"""Helpers shared by the tests: load a script as a module, run it as a user would, read
what a run writes, and small probe environments with a known value function."""

from __future__ import annotations

import collections
import functools
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

ROOT = Path(__file__).resolve().parents[1]


# DQN and C51 flags whose first steps, stepped by hand, take no gradient step: learning starts
# after them (and before the end: a run with no gradient step is refused)
NO_LEARNING = dict(total_timesteps=2 * 10**6, learning_starts=10**6)


def run_args(module: ModuleType, run_dir: Path) -> Any:
    """The Args a run directory's args.json records, read as --resume reads them."""
    return module.args_from_record(module.Flags, module.read_record(run_dir), run_dir)


def load_script(name: str) -> ModuleType:
    """The script vibe_rl/{name}.py, imported from the installed package (pip install -e .)."""
    return importlib.import_module(f"vibe_rl.{name}")


def load_file(path: Path, name: str) -> ModuleType:
    """A Python file that is not in a package (benchmark/peers/*.py), executed as the module name."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def skip_module_without_playground() -> None:
    """Skip the calling test module unless the optional extra playground is installed. The check finds
    mujoco_playground without importing it: the import costs seconds, paid only where its tests run."""
    if importlib.util.find_spec("mujoco_playground") is None:
        pytest.skip("the optional extra playground: pip install -e '.[playground]'", allow_module_level=True)


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


def rewound_copy(output_dir: Path, copy: Path) -> list[Path]:
    """A finished run's output directory copied to `copy` and rewound to its first checkpoint, as a
    run stopped after that chunk leaves it (no newer checkpoint, no eval.json); `--resume` on it must
    end the same as the run. Cheaper than a third process stopped by a signal (test_contract.py
    tests the stop itself). Returns the copied run directories, sorted."""
    shutil.copytree(output_dir, copy)
    runs = sorted(p for p in copy.iterdir() if p.is_dir())
    for run_dir in runs:
        checkpoints = sorted((run_dir / "checkpoints").glob("step_*.msgpack"))
        assert len(checkpoints) == 2, checkpoints  # the first chunk's and the last
        checkpoints[-1].unlink()
        (run_dir / "eval.json").unlink()
    return runs


def steps_trained(stdout: str) -> int:
    """The env steps a process trained, from its closing line `trained N steps x S seed(s) ...`."""
    return int(re.search(r"^trained ([\d,]+) steps", stdout, re.MULTILINE).group(1).replace(",", ""))


def exit_of_main(module: ModuleType, flags: list[str], monkeypatch: Any, capsys: Any) -> tuple[int, str]:
    """Call a script's main() with FLAGS as its command line; (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *flags, *session_cache()])
    with pytest.raises(SystemExit) as exit_info:
        module.main(module.Flags)
    return exit_info.value.code, capsys.readouterr().err


def main_in_process(module: ModuleType, flags: list[str], monkeypatch: Any, capsys: Any) -> str:
    """Call a script's main() with FLAGS as its command line, in this process: a resume that tests
    no signal, exit status or new process, without starting Python and the imports again (~2.5 s a
    run). Its stdout; a failure raises. This process's JAX keeps the devices it started with: a run
    whose bits depend on its layout on the devices needs a process of its own."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *flags, *session_cache()])
    monkeypatch.setenv("WANDB_MODE", "offline")  # as in the processes the tests start
    module.main(module.Flags)
    return capsys.readouterr().out


def copy_of_run(template: Path, tmp_path: Path) -> Path:
    """A copy of a finished run made once by a fixture: a test may move or change it (a resume writes
    where the run lies)."""
    return Path(shutil.copytree(template, tmp_path / template.name))


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
    may be partly masked): the final state, and each chunk's metrics by name (losses/td_loss: td_loss)."""
    per_chunk, chunks = module.plan_chunks(algo.num_iterations, num_chunks)
    chunk = jax.jit(lambda state, first: module.run_chunk(algo, per_chunk, state, first))
    state, metrics = algo.init(key), []
    for c in range(chunks):
        state, logged = chunk(state, jnp.int32(c * per_chunk))  # {tag: [per_chunk]}
        by_name = {tag.rpartition("/")[2]: x for tag, x in logged.items()}
        logged_type = metrics[0].__class__ if metrics else collections.namedtuple("Logged", by_name)
        metrics.append(logged_type(**by_name))  # a pytree, as Metrics is
    return state, metrics


def train_setup(module: ModuleType, setup: Any, key: jax.Array) -> tuple[Any, Any]:
    """make_train's train(key) of a script, for a setup already built (e.g. on a probe env)."""
    indices = jnp.arange(setup.sizes.num_iterations)
    step = lambda state, index: module.iteration(setup, state, index)
    return jax.lax.scan(step, module.init_state(setup, key), indices)


def probe_spec(module: ModuleType, env: Any) -> Any:
    """A script's EnvSpec of a probe env (make_env knows only the registered ones)."""
    return module.env_spec(env, env.default_params)


# --- --normalize-obs in the off-policy scripts (sac_jax, td3_jax): the same checks ---


def check_observation_statistics(module: ModuleType) -> None:
    """Batches of 7, 1 and 12 observations merged one after another give numpy's mean and
    (population) variance of all 20, with the statistics' start (mean 0, var 1) weighing 1e-4;
    normalize then maps the 20 to mean 0 and std 1, clips at +-10, and is the identity when off."""
    rng = np.random.default_rng(0)
    loc, scale = np.array([1.0, -5.0, 20.0]), np.array([0.5, 2.0, 8.0])
    batches = [(loc + scale * rng.normal(size=(n, 3))).astype(np.float32) for n in (7, 1, 12)]
    rms, update = module.rms_init(3), jax.jit(module.rms_update)
    for batch in batches:
        rms = update(rms, jnp.asarray(batch))
    everything = np.concatenate(batches).astype(np.float64)  # [20, 3]
    np.testing.assert_allclose(rms.count, 20.0, atol=1e-3)  # 20 observations and the start's 1e-4
    np.testing.assert_allclose(rms.mean, everything.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rms.var, everything.var(0), rtol=5e-3)  # the start's weight aside:
    start, total = 1e-4, 20 + 1e-4  # it counts as 1e-4 of an observation of mean 0 and variance 1
    mean = everything.sum(0) / total
    var = (start * (1.0 + mean**2) + ((everything - mean) ** 2).sum(0)) / total
    np.testing.assert_allclose(rms.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rms.var, var, rtol=1e-4)
    normalized = np.asarray(module.normalize(jnp.asarray(everything, jnp.float32), rms, True))
    np.testing.assert_allclose(normalized.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(normalized.std(0), 1.0, rtol=5e-3)  # the start's weight aside
    far = rms.mean + jnp.array([-1.0, 1.0, 1.0]) * 100.0 * jnp.sqrt(rms.var)  # 100 std away
    np.testing.assert_allclose(module.normalize(far, rms, True), [-10.0, 10.0, 10.0])
    assert module.normalize(far, rms, False) is far


def check_statistics_of_every_observation_acted_in(module: ModuleType, args: Any) -> None:
    """Under jit and vmap over 3 seeds: each seed's statistics are numpy's mean and variance of
    the observations it acted in, random steps included (its buffer holds them all, raw)."""
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state, metrics = jax.jit(jax.vmap(module.make_train(args)))(keys)
    rms = state.obs_rms
    assert rms.mean.shape == rms.var.shape == (3, 3) and rms.count.shape == (3,)
    np.testing.assert_allclose(rms.count, 300.0, atol=1e-3)
    acted = np.asarray(state.buffer.data.obs[:, :150], np.float64).reshape(3, 300, 3)  # [S, 150 * N, obs]
    np.testing.assert_allclose(rms.mean, acted.mean(1), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(rms.var, acted.var(1), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(acted[..., 0] ** 2 + acted[..., 1] ** 2, 1.0, rtol=1e-5)  # raw: cos, sin
    assert np.isfinite(metrics.qf_loss[:, 2:]).all() and np.isfinite(metrics.actor_loss[:, 2:]).all()


def check_normalize_obs_paths(module: ModuleType, on_args: Any, off_args: Any) -> None:
    """With --normalize-obs a gradient step on raw observations is the step without it on the
    observations normalised by hand (obs and next_obs); so are the action taken in the env and
    the evaluation action. Without normalisation the step differs."""
    on, off = module.build_setup(on_args), module.build_setup(off_args)
    state = module.init_state(on, jax.random.PRNGKey(0))
    rms = module.RunningMeanStd(jnp.array([0.5, -0.2, 3.0]), jnp.array([0.04, 0.25, 9.0]), jnp.asarray(50.0))
    by_hand = lambda obs: jnp.clip((obs - rms.mean) / jnp.sqrt(rms.var + 1e-8), -10.0, 10.0)
    obs, next_obs = (3.0 * jax.random.normal(jax.random.PRNGKey(k), (8, 1, 3)) + 1.0 for k in (1, 2))
    data = module.Transition(obs, jnp.zeros((8, 1, 1)), jnp.ones((8, 1)), next_obs, jnp.zeros((8, 1)))
    raw = module.ReplayBuffer(data, jnp.asarray(0, jnp.int32), jnp.asarray(8, jnp.int32))
    normalised = raw._replace(data=data._replace(obs=by_hand(obs), next_obs=by_hand(next_obs)))
    key, index = jax.random.PRNGKey(3), jnp.int32(0)  # step 0: the delayed steps and the targets too
    learned = jax.jit(functools.partial(module.learn, on))(state.learner, raw, rms, key, index)
    by_hand_learned = jax.jit(functools.partial(module.learn, off))(
        state.learner, normalised, rms, key, index
    )
    for a, b in zip(jax.tree.leaves(learned), jax.tree.leaves(by_hand_learned), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    unnormalised = jax.jit(functools.partial(module.learn, off))(state.learner, raw, rms, key, index)
    assert not np.allclose(unnormalised[1].qf_loss, learned[1].qf_loss)

    # acting: a step past learning_starts stores the action the policy took in the (normalised) obs
    state = state._replace(obs_rms=rms)
    stepped, _ = jax.jit(functools.partial(module.step, on))(state, jnp.int32(200))
    by_hand_stepped, _ = jax.jit(functools.partial(module.step, off))(
        state._replace(obs=by_hand(state.obs)), 200
    )
    np.testing.assert_allclose(
        stepped.buffer.data.action[0], by_hand_stepped.buffer.data.action[0], rtol=1e-6
    )

    model, eval_obs = module.SavedModel(state.learner.params, rms), obs[:, 0]  # [8, obs_dim]
    np.testing.assert_allclose(
        module.greedy_action(on, model, eval_obs),
        module.greedy_action(off, model, by_hand(eval_obs)),
        rtol=1e-6,
    )


def newest_checkpoint(module: ModuleType, run_dir: Path) -> tuple[int, Any]:
    """(iterations done, state) of a run directory's newest checkpoint."""
    algo = module.make_algorithm(run_args(module, run_dir))
    template = jax.eval_shape(algo.init, jax.random.PRNGKey(0))
    return module.read_checkpoint(sorted((run_dir / "checkpoints").glob("step_*.msgpack"))[-1], template)


def check_a_normalized_run_saves_its_statistics(module: ModuleType, tmp_path: Path) -> None:
    """--normalize-obs from the command line: the checkpoint and the saved model hold the
    statistics of the 600 observations acted in, and the saved model evaluates as the run's own
    evaluation did. (That a stopped run resumes them exactly is test_contract.py's resume test,
    whose run has --normalize-obs.)"""
    tiny = "--total-timesteps 600 --learning-starts 300 --batch-size 32 --hidden-size 32 --log-frequency 20"
    flags = ["--normalize-obs", *tiny.split(), "--num-chunks", "30", "--eval-episodes", "4"]
    finished = run_script(
        module.__name__.split(".")[-1], *flags, "--save-model", "--output-dir", str(tmp_path / "a")
    )
    assert finished.returncode == 0, finished.stderr
    run_dir = only_run_dir(tmp_path / "a")
    iterations, final = newest_checkpoint(module, run_dir)
    acted = np.asarray(final.buffer.data.obs[:600], np.float64).reshape(600, 3)  # raw, 1 env
    np.testing.assert_allclose(final.obs_rms.count, 600.0, atol=1e-3)
    np.testing.assert_allclose(final.obs_rms.mean, acted.mean(0), rtol=1e-3, atol=1e-4)
    algo = module.make_algorithm(run_args(module, run_dir))
    template = algo.model(jax.eval_shape(algo.init, jax.random.PRNGKey(0)))
    saved = flax.serialization.from_bytes(
        template, (run_dir / f"{module.__name__.split('.')[-1]}.flax").read_bytes()
    )
    assert tree_equal(saved, algo.model(final))  # the parameters and the statistics
    evaluation = json.loads((run_dir / "eval.json").read_text())
    reloaded = module.evaluate_saved_model(module.Flags, run_dir, 4, module.EVAL_SEED)  # the run's keys
    np.testing.assert_allclose(reloaded["returns"], evaluation["returns"], rtol=1e-3)


def assert_chunks_equal_one_program(module: ModuleType, args: Any, loss: str = "loss") -> None:
    """A replay script trained in --num-chunks chunks ends as one make_train program does (its buffer
    included), to float rounding. args: 5 iterations in chunks of 2, so the last chunk runs one and
    skips one (its metric `loss` NaN)."""
    algo = module.make_algorithm(args)
    assert (algo.num_iterations, *module.plan_chunks(algo.num_iterations, args.num_chunks)) == (5, 2, 3)
    key = jax.random.PRNGKey(7)
    final, _ = jax.jit(module.make_train(args))(key)
    state, metrics = run_in_chunks(module, algo, key, args.num_chunks)
    assert bool(jnp.isnan(getattr(metrics[-1], loss)[-1]))  # the skipped iteration
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
