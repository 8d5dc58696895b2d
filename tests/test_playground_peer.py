"""benchmark/peers/playground_brax.py: Playground's configs with the flags set on them, the pendulum
name bug its docstring reports, the refusal of an unknown task, MuJoCo's warnings kept out of the
working directory; and tiny PPO and SAC runs on playground/CartpoleBalance whose lines parse as
benchmark/run.py parses brax_train.py's."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import mujoco
import pytest
from _helpers import ROOT, load_file, session_cache, skip_module_without_playground, subprocess_env

skip_module_without_playground()
RUNNER = ROOT / "benchmark" / "peers" / "playground_brax.py"


@pytest.fixture(scope="module")
def runner():
    return load_file(RUNNER, "playground_brax")


def test_the_flags_are_set_on_playgrounds_config(runner):
    args = runner.parse_args(["--algo", "ppo", "--env-id", "playground/CheetahRun", "--num-envs", "64"])
    config, network, lines = runner.make_config(args, "CheetahRun")
    assert config["num_envs"] == 64 and config["unroll_length"] == 30 and config["num_resets_per_eval"] == 10
    assert config["num_timesteps"] == 60_000_000 and config["num_updates_per_batch"] == 16
    assert config["deterministic_eval"] is True and config["num_eval_envs"] == 32
    assert "num_evals" not in config and network == {}
    assert "num_envs=64 (config: 2048)" in lines[-1] and "num_resets_per_eval=10" in lines[0]
    args = runner.parse_args(["--algo", "sac", "--env-id", "playground/CheetahRun", "--batch-size", "256"])
    config, network, lines = runner.make_config(args, "CheetahRun")
    assert network == {"q_network_layer_norm": True} and "q_network_layer_norm=True" in "\n".join(lines)
    assert config["num_timesteps"] == 10_000_000 and config["batch_size"] == 256
    assert "num_resets_per_eval" not in config  # sac.train has no such keyword
    assert any(line.startswith("dropped: num_resets_per_eval=10") for line in lines)
    assert set(config) <= set(inspect.signature(runner.TRAINERS["sac"]).parameters)
    with pytest.raises(SystemExit):  # a PPO-only flag given to SAC
        runner.parse_args(["--algo", "sac", "--num-resets-per-eval", "1"])


def test_the_pendulum_special_cases_match_no_task(runner):
    """The runner's docstring: the configs test "PendulumSwingUp"; the task is "PendulumSwingup"."""
    params = runner.dm_control_suite_params
    assert "PendulumSwingup" in runner.dm_control_suite.ALL_ENVS
    assert "PendulumSwingUp" not in runner.dm_control_suite.ALL_ENVS
    source = inspect.getsource(params).splitlines()
    assert source[55].strip() == 'elif env_name == "PendulumSwingUp":'  # line 56
    assert source[136].strip() == 'if env_name == "PendulumSwingUp":'  # line 137
    assert '"PendulumSwingUp"' in source[145]  # line 146
    ppo, sac = params.brax_ppo_config("PendulumSwingup"), params.brax_sac_config("PendulumSwingup")
    assert ppo.action_repeat == 1 and ppo.num_updates_per_batch == 16  # not the special case's 4 and 4
    assert sac.action_repeat == 1 and sac.num_timesteps == 5_000_000  # not 4 and 10M
    with pytest.raises(ValueError):
        params.brax_ppo_config("PendulumSwingUp")


def test_mujoco_warnings_go_to_stderr_not_to_a_file(runner, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = mujoco.get_mju_user_warning()
    try:
        runner.send_mujoco_warnings_to_stderr()
        runner.registry.load("CheetahRun", config_overrides=runner.ENV_OVERRIDES)  # settotalmass
        runner.registry.load("CheetahRun", config_overrides=runner.ENV_OVERRIDES)
    finally:
        mujoco.set_mju_user_warning(before)
    assert list(tmp_path.iterdir()) == []  # no MUJOCO_LOG.TXT
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 1 and warned[0].startswith("MuJoCo warning:") and "settotalmass" in warned[0]


@pytest.mark.parametrize("env_id", ["playground/PendulumSwingUp", "brax/hopper"])
def test_an_unknown_task_is_refused_in_one_line(env_id):
    command = [sys.executable, str(RUNNER), "--env-id", env_id]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert (
        line.startswith("error: --env-id must be playground/<name>, one of: ") and "PendulumSwingup" in line
    )


TINY = {  # a few hundred steps: the test is of the runner's lines, not of learning
    "ppo": ["--num-envs", "16", "--batch-size", "16", "--num-minibatches", "2", "--num-steps", "5"]
    + ["--update-epochs", "1", "--num-resets-per-eval", "1", "--total-timesteps", "320"],
    "sac": ["--num-envs", "16", "--batch-size", "32", "--learning-starts", "64", "--buffer-size", "4096"]
    + ["--grad-updates-per-step", "1", "--total-timesteps", "160"],
}


@pytest.mark.slow  # a minute each on 2 cores, compiling Brax's trainers
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_a_tiny_run_prints_the_lines_the_benchmark_parses(algo, tmp_path):
    command = [sys.executable, str(RUNNER), "--algo", algo, "--env-id", "playground/CartpoleBalance"]
    command += [*TINY[algo], "--eval-points", "2", "--eval-episodes", "4", "--output-dir", "runs"]
    done = subprocess.run(
        [*command, *session_cache()],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    steps = {"ppo": 320, "sac": 160}[algo]
    assert re.search(
        rf"^playground_{algo} config for playground/CartpoleBalance: Playground's config", out, re.M
    )
    assert re.search(rf"^compiled playground_{algo} \(seed 1\) in [0-9.]+s$", out, re.M)
    assert re.search(
        r"^seed 1: compile [0-9.]+s, evaluations [0-9.]+s, training [0-9.]+s, [0-9,]+ steps/s", out, re.M
    )
    assert re.search(r"^seed 1: wall [0-9.]+s, eval return -?[0-9.]+$", out, re.M)
    assert re.search(rf"^trained {steps} steps in [0-9.]+s$", out, re.M)
    assert re.search(r"^process wall [0-9.]+s$", out, re.M)
    bench = importlib.import_module("benchmark.run")  # what the benchmark reads off a peer's log
    assert len(bench.COMPILED.findall(out)) == 1 and len(bench.TRAINED.findall(out)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no MUJOCO_LOG.TXT
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith(f"playground-CartpoleBalance__playground_{algo}__1__")
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["global_step"] == steps and evaluation["episodes"] == 4
    assert evaluation["avg_episode_length"] == 1000  # the full episode: CartpoleBalance never ends early
    assert len(evaluation["eval_curve"]) == 3 and evaluation["eval_curve"][-1]["mean"] == evaluation["mean"]
    assert re.search(rf"^{re.escape(str(Path('runs') / run_dir.name))}: eval return", out, re.M)
    assert evaluation["peer_config"]["wrap_env_fn"] == "mujoco_playground.wrapper.wrap_for_brax_training"
    assert json.loads((run_dir / "args.json").read_text())["num_envs"] == 16
