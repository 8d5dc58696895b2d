"""benchmark/peers/brax_train.py: the jax.device_put_replicated shim, the budget planning and the
flags (fast, no training); the slow test runs the runner on a tiny PPO budget."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from _helpers import ROOT, load_file

RUNNER = ROOT / "benchmark" / "peers" / "brax_train.py"


@pytest.fixture(scope="module")
def runner():
    return load_file(RUNNER, "brax_train")


def test_device_put_replicated_stacks_every_leaf_on_the_pmap_axis(runner):
    devices = jax.local_devices()
    put = runner.make_device_put_replicated("i")
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "steps": 0, "key": jax.random.PRNGKey(3)}
    out = put(tree, devices)
    assert out["w"].shape == (len(devices), 2, 3) and out["steps"].shape == (len(devices),)
    for i in range(len(devices)):
        np.testing.assert_array_equal(out["w"][i], tree["w"])
        np.testing.assert_array_equal(out["key"][i], tree["key"])
    assert out["w"].sharding.mesh.axis_names == ("i",)
    assert out["w"].sharding.device_set == set(devices)
    # what Brax does with it: a pmap over those devices, one slice each
    doubled = jax.pmap(lambda t: jax.lax.psum(t["w"], "i"), axis_name="i")(out)
    np.testing.assert_array_equal(doubled[0], tree["w"] * len(devices))
    with pytest.raises(ValueError):
        put(tree, [])


def test_the_shim_uses_the_axis_brax_pmaps_over(runner):
    assert runner.ppo._PMAP_AXIS_NAME == runner.sac._PMAP_AXIS_NAME == "i"


def test_plan_epochs_overshoots_least(runner):
    assert runner.plan_epochs(3, 10) == 3  # fewer units than points: one each
    assert runner.plan_epochs(1000, 10) == 10
    assert runner.plan_epochs(13, 10) == 7  # 7 x 2 = 14 units (10 epochs would train 20)
    for units in range(1, 200):
        epochs = runner.plan_epochs(units, 10)
        assert 1 <= epochs <= 10 and epochs * math.ceil(units / epochs) >= units


def test_plan_budget_counts_as_brax_does(runner):
    # PPO: training steps of batch_size x unroll_length x num_minibatches x action_repeat env steps
    ppo = {"num_timesteps": 50_000, "batch_size": 64, "unroll_length": 5, "num_minibatches": 8}
    assert runner.plan_budget("ppo", ppo | {"action_repeat": 1, "num_envs": 64}, 10) == (10, 51_200)
    # num_resets_per_eval R (Playground's configs: 10): an epoch is R rounds of whole training steps
    ppo |= {"num_timesteps": 30_000}
    assert runner.plan_budget("ppo", ppo, 10) == (6, 12 * 2560)
    assert runner.plan_budget("ppo", ppo | {"num_resets_per_eval": 10}, 10) == (2, 2 * 10 * 2560)
    # SAC: the prefill (min_replay_size, whole actor steps of num_envs) counts in the budget
    sac = {"num_timesteps": 3000, "num_envs": 128, "min_replay_size": 512}
    assert runner.plan_budget("sac", sac, 10) == (10, 512 + 20 * 128)


def test_flags_map_onto_the_published_config(runner, capsys):
    args = runner.parse_args(["--algo", "ppo", "--env-id", "brax/reacher", "--num-envs", "64"])
    config, line = runner.make_config(args, "reacher")
    assert config["action_repeat"] == 4 and config["unroll_length"] == 50 and config["num_envs"] == 64
    assert config["deterministic_eval"] is True and config["num_eval_envs"] == 32
    assert "num_envs=64 (config: 2048)" in line and "published" in line
    args = runner.parse_args(["--algo", "sac", "--env-id", "brax/reacher", "--total-timesteps", "5000"])
    config, line = runner.make_config(args, "reacher")
    assert "no published config" in line and config["num_timesteps"] == 5000
    with pytest.raises(SystemExit):  # no published config and no budget
        runner.make_config(runner.parse_args(["--algo", "sac", "--env-id", "brax/reacher"]), "reacher")
    with pytest.raises(SystemExit):  # a PPO flag given to SAC
        runner.parse_args(["--algo", "sac", "--num-steps", "5"])
    with pytest.raises(SystemExit):
        runner.parse_args(["--env-id", "CartPole-v1"])


@pytest.mark.slow
def test_a_tiny_ppo_run_writes_its_run_directory(tmp_path):
    command = [sys.executable, str(RUNNER), "--algo", "ppo", "--env-id", "brax/inverted_pendulum"]
    command += ["--total-timesteps", "20000", "--num-envs", "64", "--batch-size", "64"]
    command += ["--num-minibatches", "8", "--eval-points", "2", "--output-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^compiled brax_ppo \(seed 1\) in [0-9.]+s$", done.stdout, re.M)
    assert re.search(r"^trained 20480 steps in [0-9.]+s$", done.stdout, re.M)
    assert re.search(r"^seed 1: wall [0-9.]+s, eval return -?[0-9.]+$", done.stdout, re.M)
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("brax-inverted_pendulum__brax_ppo__1__")
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["global_step"] == 20480 and evaluation["episodes"] == 32
    assert [p["global_step"] for p in evaluation["eval_curve"]] == [0, 10240, 20480]
    assert evaluation["eval_curve"][-1]["mean"] == evaluation["mean"]
    assert json.loads((run_dir / "args.json").read_text())["num_envs"] == 64
