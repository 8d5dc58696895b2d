"""Tests of vibe_rl/ppo_multigpu.py: the minibatch layout, the parts it shares with ppo_jax_scan.py,
1 device == 4 devices (replicated; and with -m slow, --fsdp and a 2x2 mesh of seeds x data), the
compiled chunk's collectives, two processes, --target-kl, learning. What every script
guarantees on the command line (bad input, resume, run directory, ...) is in test_contract.py.

Several devices on a CPU need XLA_FLAGS=--xla_force_host_platform_device_count=N set before jax
is imported, so those tests run this file as a worker in a subprocess:
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/test_ppo_multigpu.py OUT_DIR VARIANT...
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    ROOT,
    check_vmapped_init,
    interrupt_after_compiling,
    only_run_dir,
    read_jsonl,
    run_in_chunks,
    run_script,
    script_command,
    subprocess_env,
    tree_equal,
)

from vibe_rl import ppo_jax_scan, ppo_multigpu as ppo

# 3 iterations of 8 envs x 16 steps, 4 minibatches (G = 1: each env gives 4 samples to each)
TINY = dict(num_envs=8, num_steps=16, total_timesteps=3 * 8 * 16, num_minibatches=4, update_epochs=2)


def forced_devices(count: int) -> dict[str, str]:
    """The environment of a started process with `count` CPU devices (and the tests' flags)."""
    return subprocess_env(f"--xla_force_host_platform_device_count={count}")


FOUR_DEVICES = forced_devices(4)
COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")


def collectives_per_computation(hlo: str) -> dict[str, list[str]]:
    """{computation name: [collective op kind, ...]} of a compiled HLO module's text."""
    found = {}
    for computation in re.split(r"\n(?=\S)", hlo):
        name = computation.split(" ", 1)[0]
        ops = []
        for line in computation.splitlines():
            match = re.search(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(", line)
            if match:
                ops.append(match.group(1) + (" [gradient]" if "transpose(jvp(" in line else ""))
        if ops:
            found[name] = ops
    return found


# --- the worker, run in a subprocess with 4 forced CPU devices ---------------------------

# name: (num_seeds, --data-devices, --fsdp); the mesh is (4 / data devices) x data devices
VARIANTS = {
    "d1": (2, 1, False),  # each seed on one device: 4 slots, seeds 1 and 2 and 2 copies (padding)
    "d4": (2, 4, False),  # both seeds on all 4 devices
    "d4_fsdp": (1, 4, True),
    "mesh2x2": (2, 2, False),  # each seed on 2 devices, the two seeds side by side
}


def train_on(out_dir: Path, name: str) -> dict[str, np.ndarray]:
    """One compiled chunk of TINY (all 3 iterations), as the CLI compiles it: the harness's
    plan_runs, initial_state and compile_chunk. Returns each seed's losses and parameters."""
    num_seeds, data_devices, fsdp = VARIANTS[name]
    args = ppo.Flags(
        **TINY,
        num_seeds=num_seeds,
        data_devices=data_devices,
        fsdp=fsdp,
        num_chunks=1,
        output_dir=str(out_dir),
    )
    run = ppo.plan_runs(args)[0]
    assert dict(run.mesh.shape) == {"seeds": 4 // data_devices, "data": data_devices}
    state = ppo.initial_state(run, None)
    chunk = ppo.compile_chunk(run, state)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.hlo.txt").write_text(chunk.as_text())
    state, metrics, _ = chunk(state, np.int32(0))  # ChunkOutput: state, metrics, finite
    kernel = state.params.actor["params"]["Dense_1"]["kernel"]  # [slots, 4, 64]: the first layer
    assert kernel.sharding.spec == (ppo.P("seeds", None, "data") if fsdp else ppo.P("seeds")), kernel.sharding
    assert state.obs.sharding.spec == ppo.P("seeds", "data")
    out = {name: metrics[f"losses/{name}"] for name in ("value_loss", "policy_loss", "entropy")}
    for i, leaf in enumerate(jax.tree.leaves(state.params)):
        out[f"param_{i}"] = leaf
    return {k: np.asarray(v)[:num_seeds] for k, v in out.items()}  # [S, ...]: the padding dropped


def minibatch_locality(num_devices: int) -> dict[str, np.ndarray]:
    """Deal a rollout whose every sample is its env's index; report where samples land."""
    T, N, M, G = 16, 8, 4, 2
    mesh = jax.make_mesh((num_devices,), ("data",), axis_types=(ppo.AxisType.Auto,))
    env_sharded = ppo.NamedSharding(mesh, ppo.P(None, "data"))
    env_index = jnp.broadcast_to(jnp.arange(N, dtype=jnp.float32), (T, N))
    batch = jax.device_put(ppo.Batch(*(env_index for _ in ppo.Batch._fields)), env_sharded)
    deal = jax.jit(lambda b, k: ppo.shuffle_into_minibatches(b, k, M, G))
    compiled = deal.lower(batch, jax.random.PRNGKey(0)).compile()
    x = compiled(batch, jax.random.PRNGKey(0)).obs  # [M, N/G, T*G/M]
    # which env indices every device holds, per device
    held = np.full((num_devices, M * (N // G // num_devices) * (T * G // M)), -1.0)
    for shard in x.addressable_shards:
        held[mesh.devices.tolist().index(shard.device)] = np.asarray(shard.data).ravel()
    return {
        "held": held,
        "spec": np.array(str(x.sharding.spec)),
        "collectives": np.array(json.dumps(collectives_per_computation(compiled.as_text()))),
    }


def worker(out_dir: str, *variants: str) -> None:
    assert jax.device_count() == 4
    results = {}
    for name in variants:
        for key, value in train_on(Path(out_dir) / name, name).items():
            results[f"{name}/{key}"] = value
    for key, value in minibatch_locality(4).items():
        results[f"local/{key}"] = value
    np.savez(Path(out_dir) / "results.npz", **results)


def on_four_devices(out: Path, *variants: str) -> dict[str, np.ndarray]:
    """The worker's results.npz, each variant's {variant}/{variant}.hlo.txt beside it in out."""
    result = subprocess.run(
        [sys.executable, __file__, str(out), *variants],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=FOUR_DEVICES,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out / "results.npz"))


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory) -> Path:
    """One device against four (each variant compiles its own chunk: 5 s here; the 2x2 mesh and
    --fsdp, two more, run with -m slow)."""
    out = tmp_path_factory.mktemp("four_devices")
    on_four_devices(out, "d1", "d4")
    return out


def assert_trains_as_one_device(r: dict[str, np.ndarray], variant: str, seeds: slice = slice(None)) -> None:
    names = [k.split("/", 1)[1] for k in r if k.startswith("d1/")]
    assert any(n.startswith("param_") for n in names) and r["d1/value_loss"].shape == (2, 3)
    for name in names:
        close = dict(rtol=1e-5, atol=1e-6, err_msg=f"{variant}: {name}")
        np.testing.assert_allclose(r[f"{variant}/{name}"], r[f"d1/{name}"][seeds], **close)


# --- the minibatch layout, the shuffle group, fsdp ---------------------------------------


def test_minibatches_are_a_permutation_within_each_group_of_envs():
    T, N, M, G = 8, 6, 4, 2
    # sample value = 100 * env + t: identifies every sample
    data = 100.0 * jnp.arange(N)[None, :] + jnp.arange(T)[:, None]  # [T, N]
    batch = ppo.Batch(*(data for _ in ppo.Batch._fields))
    minibatches = ppo.shuffle_into_minibatches(batch, jax.random.PRNGKey(3), M, G)
    x = np.asarray(minibatches.obs)
    assert x.shape == (M, N // G, T * G // M)
    for group in range(N // G):
        got = np.sort(x[:, group].ravel())
        envs = np.arange(group * G, (group + 1) * G)
        expected = np.sort((100.0 * envs[None, :] + np.arange(T)[:, None]).ravel())
        np.testing.assert_array_equal(got, expected)  # each sample exactly once, in its group
    assert not np.array_equal(x[:, 0].ravel(), np.sort(x[:, 0].ravel())), "not shuffled"
    for leaf in jax.tree.leaves(minibatches):  # every field is dealt the same way
        np.testing.assert_array_equal(np.asarray(leaf), x)


def test_advantages_are_normalised_per_minibatch():
    advantages = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 5)) * 3.0 + 2.0
    normalised = ppo.normalize_advantages(advantages)
    np.testing.assert_allclose(normalised.mean(axis=(1, 2)), 0.0, atol=1e-5)
    np.testing.assert_allclose(normalised.std(axis=(1, 2)), 1.0, rtol=1e-4)


def test_derived_sizes_are_not_flags_and_the_shuffle_group_is_the_smallest_that_divides():
    sizes = ppo.build_setup(ppo.Flags()).sizes  # 128 steps, 4 minibatches: G = 1
    assert sizes[:4] == (512, 128, 976, 1) and sizes.envs_per_device == 4 // sizes.data_axis
    assert ppo.build_setup(ppo.Flags(num_steps=10, num_envs=8)).sizes.group_envs == 2  # 4 | 10 * G
    assert not {f.name for f in dataclasses.fields(ppo.Args)} & set(ppo.Sizes._fields)


def test_fsdp_spec_shards_the_largest_divisible_axis():
    assert ppo.fsdp_spec((4, 64), 4) == ppo.P(None, "data")
    assert ppo.fsdp_spec((64, 2), 4) == ppo.P("data")
    assert ppo.fsdp_spec((2,), 4) == ppo.P()


def test_state_specs_split_the_env_fields_along_data():
    setup = ppo.build_setup(ppo.Flags(**TINY, fsdp=True))
    state = jax.eval_shape(lambda key: ppo.init_state(setup, key), jax.random.PRNGKey(0))
    specs = ppo.state_specs(setup, state)
    is_spec = lambda x: isinstance(x, ppo.P)  # noqa: E731
    assert set(jax.tree.leaves(specs.env_state, is_leaf=is_spec)) == {ppo.P("data")}
    assert specs.obs == specs.episode_return == ppo.P("data")
    assert specs.key == ppo.P() and specs.obs_rms == ppo.RunningMeanStd(ppo.P(), ppo.P(), ppo.P())
    assert specs.params.actor["params"]["Dense_1"]["kernel"] == ppo.P(
        None, "data"
    )  # [4, 64]: the first layer


# --- the same PPO as ppo_jax_scan.py where the algorithm is the same -------------------


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_init_sampling_and_rollout_are_those_of_ppo_jax_scan(env_id):
    """Both PPO files act alike: the same initial state, the same actions from the same noise
    drawn ahead (both sample their distrax policies by hand), the same metrics and tags."""
    args = dict(**TINY, env_id=env_id)
    ours, theirs = ppo.build_setup(ppo.Flags(**args)), ppo_jax_scan.build_setup(ppo_jax_scan.Flags(**args))
    key = jax.random.PRNGKey(5)
    state = jax.jit(lambda k: ppo.init_state(ours, k))(key)
    assert tree_equal(state, jax.jit(lambda k: ppo_jax_scan.init_state(theirs, k))(key))
    after, trajectory = jax.jit(lambda s: ppo.rollout(ours, s))(state)
    after_theirs, trajectory_theirs = jax.jit(lambda s: ppo_jax_scan.rollout(theirs, s))(state)
    assert tree_equal(trajectory, trajectory_theirs) and tree_equal(after, after_theirs)
    assert ppo.Metrics._fields == ppo_jax_scan.Metrics._fields  # so the tags too (the harness names them)


def test_the_commands_its_docstring_gives_run_ppo_multigpu():
    """ppo_multigpu.py began as a copy of ppo_jax_scan.py: a command its docstring gives a user runs this
    script, not that one. (The harness's docstrings are the same text in every script: test_harness.py.)"""
    commands = re.findall(r"python (\S+\.py)", ppo.__doc__)
    assert commands and set(commands) == {"vibe_rl/ppo_multigpu.py"}, commands


# --- shapes under jit and vmap; chunks equal the single program; --target-kl -----------


def test_vmapped_init_runs_each_qr_unbatched_with_the_same_parameters():
    setup = ppo.build_setup(ppo.Flags(**TINY))
    check_vmapped_init(lambda key: ppo.init_state(setup, key))


def test_make_train_jit_vmap_continuous_actions():
    """The PureJaxRL entry point on a Box action space: 2 seeds, one program."""
    args = ppo.Flags(**{**TINY, "env_id": "Pendulum-v1", "num_envs": 2, "total_timesteps": 2 * 16 * 2})
    state, metrics = jax.jit(jax.vmap(ppo.make_train(args)))(jax.random.split(jax.random.PRNGKey(0), 2))
    assert metrics.value_loss.shape == (2, 2) and np.isfinite(np.asarray(metrics.value_loss)).all()
    assert state.obs.shape == (2, 2, 3) and state.params.actor["params"]["log_std"].shape == (2, 1)
    assert not np.allclose(metrics.value_loss[0], metrics.value_loss[1])  # independent seeds


@pytest.mark.slow  # the harness's chunks: ppo_jax_scan and dqn_jax by default; this state: its bitwise resume
def test_chunked_run_equals_single_program():
    """The CLI's compiled chunks (the last one partly masked) train as make_train does."""
    args = ppo.Flags(**{**TINY, "total_timesteps": 5 * 8 * 16})  # 5 iterations: chunks of 2, 2, 1
    algo = ppo.make_algorithm(args)
    key = jax.random.PRNGKey(7)
    final, _ = jax.jit(ppo.make_train(args))(key)
    state, metrics = run_in_chunks(ppo, algo, key, 3)
    chunk_metrics = metrics[-1]
    assert bool(jnp.isnan(chunk_metrics.value_loss[-1])) and not bool(jnp.isnan(chunk_metrics.value_loss[0]))
    for a, b in zip(jax.tree.leaves(final.params), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_target_kl_logs_the_last_epoch_that_ran():
    """--target-kl 0 stops every iteration after its first epoch, so it trains exactly as one
    epoch does, and logs that epoch's losses (it used to log the skipped epoch's NaN)."""
    key = jax.random.PRNGKey(0)
    _, stopped = jax.jit(ppo.make_train(ppo.Flags(**{**TINY, "update_epochs": 3}, target_kl=0.0)))(key)
    _, one_epoch = jax.jit(ppo.make_train(ppo.Flags(**{**TINY, "update_epochs": 1})))(key)
    for name in ppo.Metrics._fields:
        np.testing.assert_allclose(
            getattr(stopped, name), getattr(one_epoch, name), rtol=1e-5, atol=1e-6, err_msg=name
        )
    assert np.isfinite(np.asarray(stopped.value_loss)).all()


# --- four devices: the same numbers, local minibatches, one all-reduce -----------------


def test_a_seed_trains_the_same_on_one_device_and_four_devices(four_devices):
    r = dict(np.load(four_devices / "results.npz"))
    assert np.isfinite(r["d1/value_loss"]).all()
    assert_trains_as_one_device(r, "d4")
    assert not np.allclose(r["d1/value_loss"][0], r["d1/value_loss"][1])  # two different seeds


@pytest.mark.slow  # 15 s: two more chunks compiled for 4 devices
def test_a_2x2_mesh_and_fsdp_train_as_one_device_with_their_collectives(tmp_path):
    r = on_four_devices(tmp_path, "d1", "mesh2x2", "d4_fsdp")
    assert_trains_as_one_device(r, "mesh2x2")
    assert_trains_as_one_device(r, "d4_fsdp", slice(0, 1))  # seed 1
    assert_one_all_reduce_per_minibatch_step(tmp_path / "mesh2x2" / "mesh2x2.hlo.txt")
    found_fsdp = collectives_per_computation((tmp_path / "d4_fsdp" / "d4_fsdp.hlo.txt").read_text())
    assert any("all-gather" in ops for ops in found_fsdp.values())  # fsdp gathers parameters


def test_minibatches_stay_on_their_device(four_devices):
    r = dict(np.load(four_devices / "results.npz"))
    assert str(r["local/spec"]) == str(ppo.P(None, "data"))
    held = r["local/held"]  # [D, samples]: env indices on each device; 2 envs per device
    for device in range(4):
        assert set(np.unique(held[device]).tolist()) == {2.0 * device, 2.0 * device + 1}
    assert json.loads(str(r["local/collectives"])) == {}, "dealing the minibatches moved data"


def assert_one_all_reduce_per_minibatch_step(hlo: Path) -> None:
    found = collectives_per_computation(hlo.read_text())
    gradient_steps = {c: ops for c, ops in found.items() if any("[gradient]" in op for op in ops)}
    assert len(gradient_steps) == 1, found  # the minibatch step's body
    (ops,) = gradient_steps.values()
    assert ops == ["all-reduce [gradient]"], ops  # all gradient leaves (and metrics) in one
    all_ops = [op.split()[0] for ops in found.values() for op in ops]
    assert set(all_ops) == {"all-reduce"}, all_ops  # replicated: no all-gather anywhere


def test_compiled_chunk_has_one_all_reduce_per_minibatch_step(four_devices):
    assert_one_all_reduce_per_minibatch_step(four_devices / "d4" / "d4.hlo.txt")
    found_1 = collectives_per_computation((four_devices / "d1" / "d1.hlo.txt").read_text())
    assert found_1 == {}, "seeds on their own devices must compile without collectives"


# --- two processes ----------------------------------------------------------------------

CLI_TINY = [
    "--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "64",
    "--num-chunks", "4", "--eval-episodes", "4", "--seed", "3", "--save-model",
]  # fmt: skip


def start_two_processes(*flags: str) -> list[subprocess.Popen]:
    """`python vibe_rl/ppo_multigpu.py FLAGS --distributed ...` as processes 0 and 1 of one run,
    2 CPU devices each, joined through a coordinator on 127.0.0.1 (CPU collectives: gloo)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    processes = []
    for i in range(2):
        distributed = ["--distributed", "--coordinator-address", f"127.0.0.1:{port}"]
        command = script_command(
            "ppo_multigpu", *flags, *distributed, "--num-processes", "2", "--process-id", str(i)
        )
        command["env"].update(forced_devices(2))
        processes.append(subprocess.Popen(**command, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return processes


@pytest.mark.slow  # 35 s: three processes, each compiling for a mesh
def test_two_processes_stopped_and_resumed_match_one_process_with_four_devices(tmp_path):
    """Two processes x 2 CPU devices, stopped by a SIGINT to process 0 after the first chunk and
    resumed, against one process with 4 devices run straight through."""
    single = run_script("ppo_multigpu", *CLI_TINY, "--output-dir", str(tmp_path / "one"), env=FOUR_DEVICES)
    assert single.returncode == 0, single.stderr[-3000:]

    first, second = start_two_processes(*CLI_TINY, "--output-dir", str(tmp_path / "two"))
    interrupt_after_compiling(first)  # process 0 finishes the chunk, stops, and says how to resume
    out, err = second.communicate(timeout=300)
    assert second.returncode == 128 + 15, err[-3000:]  # process 1 stops with it (signal: SIGTERM)
    assert not [line for line in out.splitlines() if "SPS" in line], "process 1 must not report progress"
    two = only_run_dir(tmp_path / "two")
    assert not (two / "eval.json").exists()

    for process in start_two_processes("--resume", str(two)):
        out, err = process.communicate(timeout=400)
        assert process.returncode == 0, err[-3000:]
    one = only_run_dir(tmp_path / "one")
    model_one = flax.serialization.msgpack_restore((one / "ppo_multigpu.flax").read_bytes())
    model_two = flax.serialization.msgpack_restore((two / "ppo_multigpu.flax").read_bytes())
    for a, b in zip(jax.tree.leaves(model_one), jax.tree.leaves(model_two), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    losses = [
        [p["losses/value_loss"] for p in read_jsonl(d / "metrics.jsonl") if "losses/value_loss" in p]
        for d in (one, two)
    ]
    assert len(losses[0]) == 4
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


# --- learning --------------------------------------------------------------------------


@pytest.mark.slow
def test_default_cli_solves_cartpole(tmp_path):
    result = run_script("ppo_multigpu", "--output-dir", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((only_run_dir(tmp_path) / "eval.json").read_text())
    assert evaluation["mean"] >= 475, evaluation["mean"]


if __name__ == "__main__":
    worker(*sys.argv[1:])
