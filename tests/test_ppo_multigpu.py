"""Tests of vibe_rl/ppo_multigpu.py: the minibatch layout, 1 device == 4 devices (replicated
and --fsdp), the compiled HLO's collectives, the CLI, two processes, bad input, learning.

Several devices on a CPU need XLA_FLAGS=--xla_force_host_platform_device_count=N set
before jax is imported, so those tests run this file as a worker in a subprocess:
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/test_ppo_multigpu.py OUT.npz
"""

from __future__ import annotations

import json
import os
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
    check_bad_input,
    check_vmapped_init,
    interrupt_after_compiling,
    load_script,
    only_run_dir,
    read_events,
    read_jsonl,
    run_script,
    start_script,
    tree_equal,
)

ppo = load_script("ppo_multigpu")

# 3 updates of 8 envs x 16 steps, 4 minibatches (G = 1: each env gives 4 samples to each)
TINY = dict(num_envs=8, num_steps=16, total_timesteps=3 * 8 * 16, num_minibatches=4, update_epochs=2)
FOUR_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
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


def train_on(num_devices: int, fsdp: bool, hlo_path: Path | None = None) -> dict[str, np.ndarray]:
    """Train TINY on the first num_devices devices; return losses and parameters."""
    args = ppo.validate_args(ppo.Args(**TINY, num_chunks=1), num_devices=num_devices)
    mesh = ppo.make_mesh(jax.devices()[:num_devices])
    agent = ppo.build_ppo(args, ppo.make_env(args.env_id), mesh)
    keys = jax.random.PRNGKey(1)[None]  # one seed
    shapes = jax.eval_shape(jax.vmap(agent.init), keys)
    shardings = ppo.state_shardings(shapes, mesh, fsdp, seed_axis=True)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    state = jax.jit(jax.vmap(agent.init), out_shardings=shardings)(keys)
    run_chunk = jax.jit(
        jax.vmap(agent.run_chunk, in_axes=(0, None)),
        in_shardings=(shardings, replicated),
        out_shardings=(shardings, replicated),
        donate_argnums=0,
    )
    compiled = run_chunk.lower(state, jnp.asarray(0, jnp.int32)).compile()
    if hlo_path is not None:
        hlo_path.write_text(compiled.as_text())
    state, metrics = compiled(state, jnp.asarray(0, jnp.int32))
    kernel = state.params.actor["params"]["Dense_1"]["kernel"]
    assert kernel.sharding.spec == (ppo.P(None, "data") if fsdp else ppo.P()), kernel.sharding
    assert state.obs.sharding.spec == ppo.P(None, "data")
    out = {"value_loss": metrics.value_loss, "policy_loss": metrics.policy_loss, "entropy": metrics.entropy}
    for i, leaf in enumerate(jax.tree.leaves(state.params)):
        out[f"param_{i}"] = leaf
    return {k: np.asarray(v) for k, v in out.items()}


def minibatch_locality(num_devices: int) -> dict[str, np.ndarray]:
    """Deal a rollout whose every sample is its env's index; report where samples land."""
    T, N, M, G = 16, 8, 4, 2
    mesh = ppo.make_mesh(jax.devices()[:num_devices])
    env_sharded = jax.sharding.NamedSharding(mesh, ppo.P(None, "data"))
    env_index = jnp.broadcast_to(jnp.arange(N, dtype=jnp.float32), (T, N))
    batch = ppo.Batch(*(env_index for _ in ppo.Batch._fields))
    batch = jax.device_put(batch, env_sharded)
    deal = jax.jit(lambda b, k: ppo.shuffle_into_minibatches(b, k, M, G))
    compiled = deal.lower(batch, jax.random.PRNGKey(0)).compile()
    minibatches = compiled(batch, jax.random.PRNGKey(0))
    x = minibatches.obs  # [M, N/G, T*G/M]
    # which env indices every device holds, per device
    held = np.full((num_devices, M * (N // G // num_devices) * (T * G // M)), -1.0)
    for shard in x.addressable_shards:
        held[mesh.devices.tolist().index(shard.device)] = np.asarray(shard.data).ravel()
    return {
        "minibatches": np.asarray(x),
        "held": held,
        "spec": np.array(str(x.sharding.spec)),
        "collectives": np.array(json.dumps(collectives_per_computation(compiled.as_text()))),
    }


def worker(out_path: str) -> None:
    assert jax.device_count() == 4
    results = {}
    hlo_dir = Path(out_path).parent
    for name, num_devices, fsdp in [("d1", 1, False), ("d4", 4, False), ("d4_fsdp", 4, True)]:
        hlo_path = hlo_dir / f"{name}.hlo.txt"
        for key, value in train_on(num_devices, fsdp, hlo_path).items():
            results[f"{name}/{key}"] = value
    for key, value in minibatch_locality(4).items():
        results[f"local/{key}"] = value
    np.savez(out_path, **results)


@pytest.fixture(scope="module")
def four_device_results(tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("four_devices") / "results.npz"
    result = subprocess.run(
        [sys.executable, __file__, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **FOUR_DEVICES},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out))


# --- the minibatch layout ------------------------------------------------------------


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


def test_default_shuffle_group_is_the_smallest_that_divides():
    assert ppo.validate_args(ppo.Args(), num_devices=1).shuffle_group_envs == 1  # 128 steps, 4 mb
    args = ppo.validate_args(ppo.Args(num_steps=10, num_minibatches=4, num_envs=8), num_devices=4)
    assert args.shuffle_group_envs == 2  # 4 must divide 10 * G
    assert args.envs_per_device == 2


def test_fsdp_spec_shards_the_largest_divisible_axis():
    assert ppo.fsdp_spec((4, 64), 4) == ppo.P(None, "data")
    assert ppo.fsdp_spec((64, 2), 4) == ppo.P("data")
    assert ppo.fsdp_spec((2,), 4) == ppo.P()


def test_vmapped_init_runs_each_qr_unbatched_with_the_same_parameters():
    args = ppo.validate_args(ppo.Args(**TINY), num_devices=1)
    check_vmapped_init(ppo.build_ppo(args, ppo.make_env(args.env_id), ppo.make_mesh(jax.devices()[:1])).init)


def test_make_train_jit_vmap_continuous_actions():
    """The PureJaxRL entry point on a Box action space: 2 seeds, one program."""
    args = ppo.Args(**{**TINY, "env_id": "Pendulum-v1", "num_envs": 2, "total_timesteps": 2 * 16 * 2})
    state, metrics = jax.jit(jax.vmap(ppo.make_train(args)))(jax.random.split(jax.random.PRNGKey(0), 2))
    assert metrics.value_loss.shape == (2, 2) and np.isfinite(np.asarray(metrics.value_loss)).all()
    assert state.obs.shape == (2, 2, 3) and state.params.actor["params"]["log_std"].shape == (2, 1)
    assert int(state.update[0]) == 2


# --- several devices: same numbers, local minibatches, one all-reduce -----------------


def test_four_devices_give_the_same_training_as_one(four_device_results):
    r = four_device_results
    names = [k.split("/", 1)[1] for k in r if k.startswith("d1/")]
    assert any(n.startswith("param_") for n in names) and "value_loss" in names
    for variant in ("d4", "d4_fsdp"):
        for name in names:
            np.testing.assert_allclose(
                r[f"{variant}/{name}"], r[f"d1/{name}"], rtol=1e-5, atol=1e-6, err_msg=f"{variant} {name}"
            )
    assert np.isfinite(r["d1/value_loss"]).all() and r["d1/value_loss"].shape == (1, 3)


def test_minibatches_stay_on_their_device(four_device_results):
    r = four_device_results
    assert str(r["local/spec"]) == str(ppo.P(None, "data"))
    held = r["local/held"]  # [D, samples]: env indices on each device; 2 envs per device
    for device in range(4):
        assert set(np.unique(held[device]).tolist()) == {2.0 * device, 2.0 * device + 1}
    assert json.loads(str(r["local/collectives"])) == {}, "dealing the minibatches moved data"


def test_compiled_update_has_one_all_reduce_per_minibatch_step(four_device_results, tmp_path_factory):
    hlo_dir = next(Path(tmp_path_factory.getbasetemp()).glob("four_devices*"))
    found = collectives_per_computation((hlo_dir / "d4.hlo.txt").read_text())
    gradient_steps = {name: ops for name, ops in found.items() if any("[gradient]" in op for op in ops)}
    assert len(gradient_steps) == 1, found  # the minibatch step's body
    (ops,) = gradient_steps.values()
    assert ops == ["all-reduce [gradient]"], ops  # all gradient leaves (and metrics) in one
    all_ops = [op.split()[0] for ops in found.values() for op in ops]
    assert set(all_ops) == {"all-reduce"}, all_ops  # replicated: no all-gather anywhere
    found_1 = collectives_per_computation((hlo_dir / "d1.hlo.txt").read_text())
    assert found_1 == {}, "one device must compile without collectives"
    found_fsdp = collectives_per_computation((hlo_dir / "d4_fsdp.hlo.txt").read_text())
    assert any("all-gather" in ops for ops in found_fsdp.values())  # fsdp gathers parameters


# --- the CLI -------------------------------------------------------------------------


def check_orbax_run_dir(run_dir: Path, tags: list[str], total_steps: int) -> dict:
    """What check_run_dir checks, with an Orbax checkpoint directory instead of msgpack."""
    from PIL import Image

    points = read_jsonl(run_dir / "metrics.jsonl")
    steps = [p["global_step"] for p in points]
    assert steps == sorted(steps) and steps[0] > 0 and steps[-1] <= total_steps
    events = read_events(run_dir)
    for tag in tags:
        assert tag in events and tag in {k for p in points for k in p}, tag
    with Image.open(run_dir / "episodic_return.png") as image:
        assert image.format == "PNG"
    steps_saved = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()]
    assert len(steps_saved) == 1 and (run_dir / "checkpoints" / steps_saved[0] / "default").is_dir()
    assert not [p for p in (run_dir / "checkpoints").iterdir() if "tmp" in p.name]
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert len(evaluation["returns"]) == evaluation["episodes"]
    return evaluation


CLI_TINY = [
    "--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "64",
    "--num-chunks", "4", "--eval-episodes", "4", "--seed", "3", "--save-model",
]  # fmt: skip


def test_cli_tiny_run_and_resume_after_sigint_equals_uninterrupted(tmp_path):
    straight = run_script("ppo_multigpu", *CLI_TINY, "--output-dir", str(tmp_path / "a"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "a")
    tags = ["charts/episodic_return", "charts/SPS", "losses/value_loss", "losses/approx_kl"]
    check_orbax_run_dir(run_dir, tags, total_steps=1024)
    points = read_jsonl(run_dir / "metrics.jsonl")
    assert sum("losses/value_loss" in p for p in points) == 4  # 4 updates, each a gradient step

    # SIGINT once compiled: the chunk in flight finishes, a checkpoint is written, exit 130
    interrupt_after_compiling(start_script("ppo_multigpu", *CLI_TINY, "--output-dir", str(tmp_path / "b")))
    interrupted = only_run_dir(tmp_path / "b")
    assert not (interrupted / "eval.json").exists()

    resumed = run_script("ppo_multigpu", "--resume", str(interrupted), "--save-model")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    model_a = flax.serialization.msgpack_restore((run_dir / "ppo_multigpu.flax").read_bytes())
    model_b = flax.serialization.msgpack_restore((interrupted / "ppo_multigpu.flax").read_bytes())
    assert tree_equal(model_a, model_b), "the resumed run differs from the uninterrupted one"
    steps = [p["global_step"] for p in read_jsonl(interrupted / "metrics.jsonl") if "losses/value_loss" in p]
    assert steps == [256, 512, 768, 1024]


def test_two_processes_match_one_process_with_four_devices(tmp_path):
    """Two processes x 2 CPU devices, joined with jax.distributed (gloo), against 1 x 4."""
    flags = [*CLI_TINY, "--num-chunks", "1"]
    single = run_script("ppo_multigpu", *flags, "--output-dir", str(tmp_path / "one"), env=FOUR_DEVICES)
    assert single.returncode == 0, single.stderr[-3000:]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    two_devices = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "WANDB_MODE": "offline"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "vibe_rl" / "ppo_multigpu.py"),
                *flags,
                "--output-dir",
                str(tmp_path / "two"),
                "--distributed",
                "--coordinator-address",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **two_devices},
        )  # fmt: skip
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=400) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert "2 process(es)" in outputs[0][0] and "4 device(s)" in outputs[0][0]
    ours = [line for line in outputs[1][0].splitlines() if not line.startswith("[Gloo]")]
    assert ours == [], "process 1 must not log"

    one, two = only_run_dir(tmp_path / "one"), only_run_dir(tmp_path / "two")
    model_one = flax.serialization.msgpack_restore((one / "ppo_multigpu.flax").read_bytes())
    model_two = flax.serialization.msgpack_restore((two / "ppo_multigpu.flax").read_bytes())
    for a, b in zip(jax.tree.leaves(model_one), jax.tree.leaves(model_two), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    losses_one = [
        p["losses/value_loss"] for p in read_jsonl(one / "metrics.jsonl") if "losses/value_loss" in p
    ]
    losses_two = [
        p["losses/value_loss"] for p in read_jsonl(two / "metrics.jsonl") if "losses/value_loss" in p
    ]
    np.testing.assert_allclose(losses_two, losses_one, rtol=1e-5)
    assert has_orbax_checkpoint(two)


def has_orbax_checkpoint(run_dir: Path) -> bool:
    return any(p.name.isdigit() for p in (run_dir / "checkpoints").iterdir())


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-minibatches", "3"], "--num-minibatches 3 must divide"),
        (["--shuffle-group-envs", "3"], "minibatches must divide per device"),
        (["--distributed"], "--distributed needs --coordinator-address"),
        (["--distributed", "--num-processes", "2"], "also needs --coordinator-address, --process-id"),
        (["--process-id", "1"], "only make sense with --distributed"),
        (
            ["--distributed", "--coordinator-address", "h:1", "--num-processes", "2", "--process-id", "2"],
            "--process-id 2 must lie in [0, --num-processes 2)",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(flags, message, capsys, monkeypatch):
    for var in ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "PMI_RANK"):
        monkeypatch.delenv(var, raising=False)
    check_bad_input(ppo, flags, message, monkeypatch, capsys)


def test_num_envs_not_divisible_by_the_devices_names_the_device_count():
    with pytest.raises(ppo.ArgsError, match="divisible by the device count, 3"):
        ppo.validate_args(ppo.Args(num_envs=4), num_devices=3)
    result = run_script("ppo_multigpu", "--num-envs", "6", timeout=120, env=FOUR_DEVICES)
    assert result.returncode == 2
    assert "--num-envs 6 must be divisible by the device count, 4" in result.stderr


# --- learning --------------------------------------------------------------------------


@pytest.mark.slow
def test_default_cli_solves_cartpole(tmp_path):
    result = run_script("ppo_multigpu", "--output-dir", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((only_run_dir(tmp_path) / "eval.json").read_text())
    assert evaluation["mean"] >= 475, evaluation["mean"]


if __name__ == "__main__":
    worker(sys.argv[1])
