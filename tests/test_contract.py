"""What every vibe_rl script guarantees on the command line.

The run harness below each banner is one text (the first test keeps every copy identical to
tests/harness.py), so its behaviour is tested once, on ppo_jax_scan (and dqn_jax, a replay buffer,
for the whole run): bad input exits 2 with one line before compiling; a --resume that conflicts
with the run is refused; a moved run directory resumes; a corrupt checkpoint falls back to the
previous one, and none readable exits 2 naming the file; a non-finite stop keeps the checkpoints;
a run writes its whole directory; a run stopped by Ctrl-C or SIGTERM and resumed ends bitwise
equal to an uninterrupted one; seeds sharded over several devices train as on one. What is each
script's own is tested for every script: its bad flags, its sizes and chunk plan, its state's
types, and that a checkpoint of its state resumes it bitwise. docs/harness.md has the table of
where each behaviour is tested. The runs are tiny (a few thousand steps): they check the
contract, not learning.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sync_harness
from _helpers import (
    ROOT,
    check_gif,
    copy_of_run,
    exit_of_main,
    interrupt_after_compiling,
    load_script,
    main_in_process,
    only_run_dir,
    read_events,
    read_jsonl,
    run_args,
    run_script,
    session_cache,
    start_script,
    tree_equal,
)

BANNER = "identical in every vibe_rl script"


class Contract(NamedTuple):
    """How to exercise one script."""

    env_id: str  # the default environment
    run: list[str]  # a short run that takes gradient steps, in many chunks (a signal lands mid-run)
    non_finite: list[str]  # flags that make the loss or parameters non-finite
    stop_signal: int  # the signal its resume test sends (SIGINT for some scripts, SIGTERM for the others)
    bad_inputs: list[tuple[list[str], str]]  # its own bad flags -> the message's start
    budgets: Any  # (total_timesteps, num_envs) -> Args overrides for the chunk-plan property
    # how far a seed's final state may lie from the same seed's on another number of devices
    device_atol: float = 1e-4


def flags(**values: Any) -> list[str]:
    return [part for name, value in values.items() for part in (f"--{name.replace('_', '-')}", str(value))]


# DQN's and C51's bad input: a replay warm-up that ends after the run's last gradient step
NO_GRADIENT_STEP = (
    flags(total_timesteps=1000, learning_starts=1000),
    "--learning-starts 1000 leaves no gradient step in 1,000 env steps (one every --train-frequency 10)",
)


def replay_budget(total: int, num_envs: int) -> dict[str, int]:
    """DQN's and C51's Args for a budget: frequencies that fit it, learning from the first step."""
    return dict(total_timesteps=total, num_envs=num_envs, train_frequency=16, target_network_frequency=512,
                learning_starts=0)  # fmt: skip


SCRIPTS = {
    "ppo_jax_scan": Contract(
        env_id="CartPole-v1",
        run=flags(num_envs=4, num_steps=16, total_timesteps=64 * 30, num_chunks=30, eval_episodes=4),
        non_finite=flags(learning_rate=1e38, max_grad_norm=1e38),
        stop_signal=signal.SIGINT,
        bad_inputs=[
            (
                flags(num_minibatches=3),
                "--num-minibatches 3 must divide num_envs * num_steps = 4 * 128 = 512",
            ),
            (flags(update_epochs=-1), "--update-epochs must be a positive integer"),
            (flags(total_timesteps=100), "--total-timesteps 100 < one batch"),
            (flags(gamma=1.5), "--gamma and --gae-lambda must lie in [0, 1]"),
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
            (flags(env_id="Acrobot-v1") + ["--mask-velocity"], "--mask-velocity needs --env-id CartPole-v1"),
        ],
        budgets=lambda total, num_envs: dict(total_timesteps=total, num_envs=num_envs, num_steps=16),
    ),
    "dqn_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4,
            learning_starts=200,
            train_frequency=4,
            target_network_frequency=40,
            buffer_size=500,
            batch_size=32,
            log_frequency=100,
            total_timesteps=1200,
            num_chunks=12,
            eval_episodes=4,
        ),
        non_finite=flags(learning_rate=1e38),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="Pendulum-v1"),
                "--env-id Pendulum-v1: DQN needs discrete actions, not Box; use vibe_rl/sac_jax.py",
            ),
            (flags(buffer_size=-1), "--buffer-size must be a positive integer, got -1"),
            (flags(learning_starts=-5), "--learning-starts must be >= 0, got -5"),
            NO_GRADIENT_STEP,
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
            (flags(tau=0), "--tau must lie in (0, 1], got 0.0"),
            (flags(end_e=1.5), "--end-e must lie in [0, 1], got 1.5"),
            (flags(num_envs=4), "--train-frequency 10 must be a multiple of --num-envs 4"),
            (
                flags(num_envs=8, train_frequency=8, target_network_frequency=8, buffer_size=4),
                "--buffer-size 4 is smaller than --num-envs 8",
            ),
        ],
        budgets=replay_budget,
    ),
    "c51_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4,
            learning_starts=200,
            train_frequency=4,
            target_network_frequency=40,
            buffer_size=500,
            batch_size=32,
            n_atoms=11,
            v_min=-10,
            v_max=10,
            log_frequency=100,
            total_timesteps=1200,
            num_chunks=12,
            eval_episodes=4,
        ),
        non_finite=flags(learning_rate=1e38),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="Pendulum-v1"),
                "--env-id Pendulum-v1: C51 needs discrete actions, not Box; "
                "use vibe_rl/sac_jax.py or vibe_rl/td3_jax.py",
            ),
            (flags(v_min=10, v_max=-10), "--v-min 10.0 must be below --v-max -10.0"),
            (flags(n_atoms=1), "--n-atoms must be at least 2, got 1"),
            (flags(buffer_size=-1), "--buffer-size must be a positive integer, got -1"),
            (flags(learning_starts=-5), "--learning-starts must be >= 0, got -5"),
            NO_GRADIENT_STEP,
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
            (flags(end_e=1.5), "--end-e must lie in [0, 1], got 1.5"),
            (flags(num_envs=4), "--train-frequency 10 must be a multiple of --num-envs 4"),
        ],
        budgets=replay_budget,
    ),
    "rainbow_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4,
            learning_starts=200,
            train_frequency=4,
            target_network_frequency=40,
            buffer_size=512,
            batch_size=32,
            n_atoms=11,
            v_min=-10,
            v_max=10,
            log_frequency=100,
            total_timesteps=1200,
            num_chunks=12,
            eval_episodes=4,
        ),
        non_finite=flags(learning_rate=1e38),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="Pendulum-v1"),
                "--env-id Pendulum-v1: Rainbow needs discrete actions, not Box; "
                "use vibe_rl/sac_jax.py or vibe_rl/td3_jax.py",
            ),
            (flags(v_min=10, v_max=-10), "--v-min 10.0 must be below --v-max -10.0"),
            (flags(n_step=0), "--n-step must be a positive integer, got 0"),
            (flags(noisy_std=0), "--noisy-std must be positive, got 0.0"),
            (flags(importance_exponent=2), "--importance-exponent must lie in [0, 1], got 2.0"),
            (flags(priority_exponent=-1), "--priority-exponent must be >= 0, got -1.0"),
            (flags(buffer_size=-1), "--buffer-size must be a positive integer, got -1"),
            NO_GRADIENT_STEP,
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
            (flags(num_envs=4), "--train-frequency 10 must be a multiple of --num-envs 4"),
        ],
        budgets=replay_budget,
    ),
    "iqn_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4,
            learning_starts=200,
            train_frequency=4,
            target_network_frequency=40,
            buffer_size=500,
            batch_size=32,
            num_tau_samples=8,
            num_tau_prime_samples=8,
            num_quantile_samples=4,
            quantile_embedding_dim=16,
            log_frequency=100,
            total_timesteps=1200,
            num_chunks=12,
            eval_episodes=4,
        ),
        non_finite=flags(learning_rate=1e38),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="Pendulum-v1"),
                "--env-id Pendulum-v1: IQN needs discrete actions, not Box; "
                "use vibe_rl/sac_jax.py or vibe_rl/td3_jax.py",
            ),
            (
                flags(env_id="Pendulum-v1") + ["--qr-dqn"],
                "--env-id Pendulum-v1: QR-DQN needs discrete actions, not Box",
            ),
            (flags(kappa=0), "--kappa must be positive, got 0.0"),
            (flags(num_tau_samples=0), "--num-tau-samples must be a positive integer, got 0"),
            (
                flags(num_tau_samples=4096, num_tau_prime_samples=4096),
                "--batch-size 128 x --num-tau-samples 4096 x --num-tau-prime-samples 4096 = 2,147,483,648",
            ),
            (flags(target_update_rate=0), "--target-update-rate must lie in (0, 1], got 0.0"),
            (flags(buffer_size=-1), "--buffer-size must be a positive integer, got -1"),
            NO_GRADIENT_STEP,
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
            (flags(num_envs=4), "--train-frequency 10 must be a multiple of --num-envs 4"),
        ],
        budgets=replay_budget,
    ),
    "sac_jax": Contract(
        env_id="Pendulum-v1",
        # short, and learning starts late (10 gradient steps): seeds sharded over 1 and 2
        # devices start off within float rounding, and Pendulum's steps and SAC's gradient
        # steps amplify it (see device_atol)
        # --normalize-obs: the resume covers the observation statistics too
        run=flags(total_timesteps=600, learning_starts=590, batch_size=32, hidden_size=32, num_chunks=30)
        + flags(eval_episodes=4)
        + ["--normalize-obs"],
        non_finite=flags(q_lr=1e38, learning_starts=200),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (flags(env_id="CartPole-v1"), "--env-id CartPole-v1: SAC needs continuous (Box) actions"),
            (flags(policy_frequency=0), "--policy-frequency must be a positive integer, got 0"),
            (flags(learning_starts=50000), "--learning-starts 50000 leaves no gradient step"),
            (
                flags(total_timesteps=1000, num_envs=4, learning_starts=997),
                "--learning-starts 997 leaves no gradient",
            ),
            (flags(buffer_size=2, num_envs=4), "--buffer-size must be at least --num-envs"),
            (flags(tau=0), "--tau must lie in (0, 1], got 0.0"),
            (flags(q_lr=0), "--policy-lr and --q-lr must be positive"),
            (flags(alpha=-0.1) + ["--no-autotune"], "--alpha and --learning-starts must be >= 0"),
        ],
        budgets=lambda total, num_envs: dict(total_timesteps=total, num_envs=num_envs, learning_starts=0),
        # With the suite's compile flags (conftest.py), Pendulum's dynamics round differently
        # with the number of seeds a device holds (3 vs 2 here), and its trajectories drift
        # apart (2e-4 after 600 steps); a mixed-up seed differs by O(1).
        device_atol=1e-3,
    ),
    "td3_jax": Contract(
        env_id="Pendulum-v1",
        # short, and learning starts late (10 gradient steps), as sac_jax's: seeds sharded over 1
        # and 2 devices start off within float rounding, and Pendulum's steps amplify it
        run=flags(total_timesteps=600, learning_starts=590, batch_size=32, hidden_size=32, num_chunks=30)
        + flags(eval_episodes=4)
        + ["--normalize-obs"],
        non_finite=flags(learning_rate=1e38, learning_starts=200),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="CartPole-v1"),
                "--env-id CartPole-v1: TD3 needs continuous (Box) actions; use vibe_rl/dqn_jax.py or vibe_rl/c51_jax.py for Discrete actions",  # noqa: E501
            ),
            (flags(policy_frequency=0), "--policy-frequency must be a positive integer, got 0"),
            (flags(learning_starts=50000), "--learning-starts 50000 leaves no gradient step"),
            (flags(learning_starts=-1), "--learning-starts must be >= 0, got -1"),
            (flags(buffer_size=2, num_envs=4), "--buffer-size must be at least --num-envs"),
            (flags(tau=0), "--tau must lie in (0, 1], got 0.0"),
            (flags(learning_rate=0), "--learning-rate must be positive, got 0.0"),
            (
                flags(noise_clip=-0.5),
                "--policy-noise, --exploration-noise and --noise-clip must be >= 0",
            ),
        ],
        budgets=lambda total, num_envs: dict(total_timesteps=total, num_envs=num_envs, learning_starts=0),
        # as sac_jax's: Pendulum's dynamics round differently with the seeds a device holds
        device_atol=1e-3,
    ),
    "pqn_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4,
            num_steps=8,
            num_minibatches=2,
            update_epochs=1,
            total_timesteps=32 * 30,
            num_chunks=30,
            eval_episodes=4,
        ),
        non_finite=flags(learning_rate=1e38, max_grad_norm=1e38),
        stop_signal=signal.SIGTERM,
        bad_inputs=[
            (
                flags(env_id="Pendulum-v1"),
                "--env-id Pendulum-v1 has continuous actions; PQN needs discrete ones (use vibe_rl/sac_jax.py)",  # noqa: E501
            ),
            (
                flags(num_minibatches=7),
                "--num-minibatches 7 must divide num_envs * num_steps = 32 * 64 = 2048",
            ),
            (flags(update_epochs=0), "--update-epochs must be a positive integer, got 0"),
            (flags(total_timesteps=100), "--total-timesteps 100 < one batch"),
            (flags(q_lambda=1.5), "--gamma and --q-lambda must lie in [0, 1]"),
            (flags(end_e=2.0), "--start-e, --end-e and --exploration-fraction must lie in [0, 1]"),
            (flags(max_grad_norm=0.0), "--max-grad-norm must be positive, got 0.0"),
            (flags(network="cnn"), "--network cnn needs image observations, not (4,)"),
        ],
        budgets=lambda total, num_envs: dict(total_timesteps=total, num_envs=num_envs, num_steps=16),
    ),
    "ppo_rnn_jax": Contract(
        env_id="CartPole-v1",
        run=flags(
            num_envs=4, num_steps=16, total_timesteps=64 * 30, num_chunks=30, eval_episodes=4, hidden_size=16
        ),
        non_finite=flags(learning_rate=1e38, max_grad_norm=1e38),
        stop_signal=signal.SIGINT,
        bad_inputs=[
            (flags(num_minibatches=3), "--num-minibatches 3 must divide --num-envs 4 (whole sequences)"),
            (flags(update_epochs=-1), "--update-epochs must be a positive integer"),
            (flags(total_timesteps=100), "--total-timesteps 100 < one batch"),
            (flags(gamma=1.5), "--gamma and --gae-lambda must lie in [0, 1]"),
            (flags(env_id="Acrobot-v1") + ["--mask-velocity"], "--mask-velocity needs --env-id CartPole-v1"),
        ],
        budgets=lambda total, num_envs: dict(
            total_timesteps=total, num_envs=num_envs, num_steps=16, num_minibatches=1
        ),
    ),
    "ppo_multigpu": Contract(
        env_id="CartPole-v1",
        run=flags(num_envs=4, num_steps=16, total_timesteps=64 * 30, num_chunks=30, eval_episodes=4),
        non_finite=flags(learning_rate=1e38, max_grad_norm=1e38),
        stop_signal=signal.SIGINT,
        bad_inputs=[
            (
                flags(num_minibatches=3),
                "--num-minibatches 3 must divide num_envs * num_steps = 4 * 128 = 512",
            ),
            (flags(total_timesteps=100), "--total-timesteps 100 < one batch"),
            (flags(data_devices=-1), "--data-devices must be >= 0, got -1"),
            (flags(data_devices=3), "--data-devices 3 must divide the device count"),
            (flags(shuffle_group_envs=-1), "--shuffle-group-envs must be >= 0, got -1"),
            (flags(shuffle_group_envs=3), "minibatches must divide per device"),
            (
                ["--distributed"],
                "--distributed needs --coordinator-address, --num-processes and --process-id",
            ),
            (["--distributed"] + flags(num_processes=2), "--distributed with --num-processes also needs"),
            (flags(process_id=1), "--process-id: only with --distributed"),
            (
                ["--distributed"] + flags(coordinator_address="host", num_processes=2, process_id=0),
                "--coordinator-address 'host' must be host:port",
            ),
        ],
        budgets=lambda total, num_envs: dict(total_timesteps=total, num_envs=num_envs, num_steps=16),
    ),
}


@pytest.fixture(params=list(SCRIPTS))
def script(request: pytest.FixtureRequest) -> str:
    return request.param


def banner_and_harness(name: str) -> tuple[int, list[str]]:
    lines = (ROOT / "vibe_rl" / f"{name}.py").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if BANNER in line)
    return index + 1, lines[index:]


# --- the text ---------------------------------------------------------------------------


def test_every_script_has_the_same_harness_below_one_banner():
    scripts = sorted(p.stem for p in (ROOT / "vibe_rl").glob("*.py") if p.stem != "__init__")
    assert set(SCRIPTS) <= set(scripts)
    reference = sync_harness.harness_text((ROOT / "tests" / "harness.py").read_text()).splitlines()
    for name in scripts:
        text = (ROOT / "vibe_rl" / f"{name}.py").read_text()
        assert text.count(BANNER) == 1, f"{name}: the banner must appear once"
        harness = banner_and_harness(name)[1]
        assert harness == reference, (
            f"{name}: its harness differs from tests/harness.py: run python tests/sync_harness.py"
        )
        main = re.search(r"^def main\(.*?(?=^\S)", "\n".join(harness) + "\nX", re.S | re.M).group(0)
        assert len(main.rstrip().splitlines()) <= 40
        numbers = [int(n) for n in re.findall(r"^# =+ (\d+)\. ", text, re.M)]
        assert numbers == list(range(1, len(numbers) + 1)) and numbers, f"{name}: sections {numbers}"


def names_defined_twice(source: str) -> list[str]:
    """Each module-level name bound twice in a script (its head and its harness, or either alone), but the
    same import repeated: the harness imports again what the algorithm's head imports (it stands alone)."""
    bound: dict[str, str] = {}  # name -> what binds it
    twice = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            where = f"{node.module}." if isinstance(node, ast.ImportFrom) else ""
            names = {(a.asname or a.name).split(".")[0]: f"import {where}{a.name}" for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = {node.name: f"line {node.lineno}"}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            nodes = [n for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]
            names = {n.id: f"line {node.lineno}" for n in nodes}
        else:
            continue
        for name, binding in names.items():
            if name in bound and not (binding == bound[name] and binding.startswith("import")):
                twice.append(f"{name} ({bound[name]}, then {binding})")
            bound[name] = binding
    return twice


def test_no_name_above_a_banner_is_defined_again_below_it():
    """A harness function named as one of the algorithm's would silently replace it: every module-level name
    of a script is bound once, but an import the head and the harness both make. A planted duplicate fails."""
    for path in sorted((ROOT / "vibe_rl").glob("*_*.py")):
        twice = names_defined_twice(path.read_text())
        assert not twice, f"{path.name}: {twice}"
    source = (ROOT / "vibe_rl" / "dqn_jax.py").read_text()
    head, banner, harness = source.partition(BANNER)
    planted = head.replace("def td_loss(", "def reset_envs(", 1) + banner + harness  # the harness's name
    assert [d.split()[0] for d in names_defined_twice(planted)] == ["reset_envs"]
    assert names_defined_twice(source + "\nimport numpy as onp\nfrom os import path as np\n") == [
        "np (import numpy, then import os.path)"
    ]


def undocumented_flags(help_text: str) -> list[str]:
    """The options of a tyro --help that say nothing but their default (a field whose comment tyro
    cannot see, such as one that ruff wrapped into parentheses), boxed (a terminal) or not."""
    blocks: list[list[str]] = []
    for raw in help_text.splitlines():
        line = raw.strip("│").rstrip()
        if re.match(r" {0,3}--[a-z]", line):  # an option; its description is indented further
            blocks.append([line.strip()])
        elif blocks and line.startswith("    "):  # the option's description, continued
            blocks[-1].append(line.strip())
    missing = []
    for first, *rest in blocks:
        spelling, _, description = re.split(r"(\s{2,})", first + "  ", maxsplit=1)
        description = re.sub(r"\(default: [^)]*\)", "", " ".join([description, *rest]))
        if not re.search(r"[a-z]", description):
            missing.append(spelling.split()[0].rstrip(","))
    return missing


def test_undocumented_flags_finds_an_option_with_only_its_default():
    boxed = "│ --seed INT   (default: 1) │\n│ --x INT  an x │\n│          (default: 2) │\n╰─"
    assert undocumented_flags(boxed) == undocumented_flags(boxed.replace("│", "")) == ["--seed"]


def test_help_documents_every_flag_and_no_derived_size(script, capsys, monkeypatch):
    module = load_script(script)
    monkeypatch.setattr("sys.argv", [f"{script}.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        module.main(module.Flags)
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    missing = undocumented_flags(text)
    assert not missing, f"--help says nothing of {missing}"
    sizes = module.make_algorithm(module.Flags()).sizes._fields
    shown = [name for name in sizes if f"--{name.replace('_', '-')} " in text]
    assert not shown, f"--help offers derived sizes: {shown}"


# --- bad input: one line, exit status 2, before anything compiles -----------------------

COMMON_BAD_INPUTS = [
    (flags(env_id="Nope-v0"), "--env-id 'Nope-v0' is not a gymnax environment; valid: "),
    (flags(num_seeds=0), "--num-seeds must be a positive integer, got 0"),
    (flags(num_chunks=0), "--num-chunks must be a positive integer, got 0"),
    (flags(eval_episodes=-2), "--eval-episodes must be a positive integer, got -2"),
    (flags(cpu_devices=-1), "--cpu-devices must be >= 0, got -1"),
    (flags(eval_frequency=-5), "--eval-frequency must be >= 0, got -5"),
    (flags(resume="/nonexistent/run"), "--resume /nonexistent/run: not a run directory (no args.json)"),
]
# DeepSea has no renderer. SAC and TD3 refuse its discrete actions first (every continuous env is drawn).
NO_RENDERER = (
    flags(env_id="DeepSea-bsuite") + ["--capture-video"],
    "--capture-video renders classic-control",
)
DRAWS_ALL_IT_TAKES = ("sac_jax", "td3_jax")
# the harness's (one script stands for all), then each script's own
BAD_INPUTS = [("ppo_jax_scan", f, m) for f, m in [*COMMON_BAD_INPUTS, NO_RENDERER]]
BAD_INPUTS += [(name, f, m) for name, c in SCRIPTS.items() for f, m in c.bad_inputs]


@pytest.mark.parametrize(("name", "bad_flags", "message"), BAD_INPUTS)
def test_bad_input_exits_2_with_one_line(name, bad_flags, message, capsys, monkeypatch):
    for variable in ("SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "PMI_RANK"):  # --distributed detects these
        monkeypatch.delenv(variable, raising=False)
    code, err = exit_of_main(load_script(name), bad_flags, monkeypatch, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{name}.py: error: {message}" in lines[0], err


def test_bad_input_from_the_shell():
    """As a user sees it: status 2, one line, no traceback, nothing written."""
    result = run_script(
        "ppo_jax_scan", "--env-id", "Nope-v0", "--output-dir", "/nonexistent/never", timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "is not a gymnax environment" in result.stderr


def test_track_without_a_wandb_login_exits_2_before_compiling(tmp_path, capsys, monkeypatch):
    """--track with no key (nor WANDB_MODE=offline) used to fail in wandb.init, after compiling."""
    for variable in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_MODE_OFFLINE", "NETRC"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc holds a key
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb"))
    flags = ["--track", "--output-dir", str(tmp_path / "runs")]
    code, err = exit_of_main(load_script("ppo_jax_scan"), flags, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1 and "--track: No API key configured" in err, err
    assert not (tmp_path / "runs").exists()  # refused before any directory was made


def fake_run(parent: Path, script: str, **saved: Any) -> Path:
    """A run directory whose args.json holds `saved`: enough for the checks of --resume that
    come before any checkpoint is read."""
    module = load_script(script)
    run_dir = parent / "a_run"
    run_dir.mkdir(parents=True)
    record = {**dataclasses.asdict(module.Flags(**saved)), "run_seed": 1, "seed_dirs": ["a_run"]}
    (run_dir / "args.json").write_text(json.dumps(record))
    return run_dir


def test_resume_with_conflicting_flags_is_refused(tmp_path, capsys, monkeypatch):
    """The training's flags, and the evaluation's (its curve's points stay comparable), are the run's."""
    module = load_script("ppo_jax_scan")
    run_dir = fake_run(tmp_path, "ppo_jax_scan", total_timesteps=12_345, eval_episodes=8)
    for flag, value, before in (("--total-timesteps", "7000", "12345"), ("--eval-episodes", "5", "8")):
        code, err = exit_of_main(module, ["--resume", str(run_dir), flag, value], monkeypatch, capsys)
        assert code == 2 and err.count("\n") == 1
        assert f"{flag} {value} conflicts with the run's {before}" in err


def test_resume_without_a_readable_checkpoint_exits_2_naming_the_file(tmp_path, capsys, monkeypatch):
    """Checkpoints that are there but do not read are refused (a run stopped before its first one
    resumes from the start: tests/test_faults.py)."""
    run_dir = fake_run(tmp_path, "ppo_jax_scan")
    module = load_script("ppo_jax_scan")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "step_000000000512.msgpack").write_bytes(b"\x81\xa5trunc")  # cut short
    code, err = exit_of_main(module, ["--resume", str(run_dir)], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{run_dir}/checkpoints/step_000000000512.msgpack: " in err


# --- the chunk plan ---------------------------------------------------------------------


def test_plan_chunks_gives_every_chunk_work():
    module = load_script("ppo_jax_scan")
    for num_iterations in range(1, 300):
        for num_chunks in (1, 2, 3, 7, 10, 64, 500):
            per_chunk, chunks = module.plan_chunks(num_iterations, num_chunks)
            assert chunks <= num_chunks and (chunks - 1) * per_chunk < num_iterations <= chunks * per_chunk


def test_each_budget_and_env_count_gives_whole_iterations_within_the_budget(script):
    """The iterations the harness plans never exceed the budget, and lose less than one of them;
    e.g. 16384 PPO steps (it ran two empty chunks) and 20480 DQN steps (it crashed)."""
    module = load_script(script)
    contract = SCRIPTS[script]
    for total in (1024, 2048, 10240, 16384, 20480, 25000, 65536, 99991, 500_000):
        for num_envs in (1, 2, 4, 8, 16):
            try:
                algo = module.make_algorithm(module.Flags(**contract.budgets(total, num_envs)))
            except module.ArgsError:
                continue  # a combination the script refuses with one line, tested above
            steps = algo.num_iterations * algo.env_steps_per_iteration
            assert total - algo.env_steps_per_iteration < steps <= total, (total, num_envs, steps)
            per_chunk, chunks = module.plan_chunks(algo.num_iterations, 10)
            assert (chunks - 1) * per_chunk < algo.num_iterations <= chunks * per_chunk


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n not in ("sac_jax", "td3_jax")])
def test_every_discrete_script_takes_an_observation_of_more_than_one_axis(name):
    """bsuite's Catch observes a [10, 5] board: the MLPs flatten it. DQN's and C51's acted per row
    of the board, an action [N, 10], and crashed in the env's step. A shape error is a tracing error:
    the iteration and the acting are traced (jax.eval_shape), not compiled."""
    module = load_script(name)
    algo = module.make_algorithm(module.Flags(**SCRIPTS[name].budgets(1024, 4), env_id="Catch-bsuite"))
    assert algo.env.obs_shape == (10, 5)

    def act_after_one_iteration(key: jax.Array) -> jax.Array:
        state, _ = algo.iteration(algo.init(key), jnp.int32(0))
        model = algo.model(state)
        obs, _ = module.reset_envs(algo.env, key, 3)  # [3, 10, 5]
        return algo.act(model, obs, algo.act_init(model, 3))[0] if algo.act_init else algo.act(model, obs)

    assert jax.eval_shape(act_after_one_iteration, jax.random.PRNGKey(0)).shape == (3,)


# --- real runs --------------------------------------------------------------------------


def read_state(module: Any, run_dir: Path) -> tuple[int, Any]:
    """The newest checkpoint of a run directory: (iterations done, state)."""
    args = run_args(module, run_dir)
    template = module.jax.eval_shape(module.make_algorithm(args).init, module.jax.random.PRNGKey(0))
    newest = sorted((run_dir / "checkpoints").glob("step_*.msgpack"))[-1]
    return module.read_checkpoint(newest, template)


def seed_dirs(output_dir: Path) -> list[Path]:
    """The run directories of seeds 1, 2, 3 (their names end __{seed}__{time})."""
    return sorted((p for p in output_dir.iterdir() if p.is_dir()), key=lambda p: int(p.name.split("__")[-2]))


@pytest.mark.parametrize(
    "script", ["ppo_jax_scan", pytest.param("dqn_jax", marks=pytest.mark.slow)]
)  # the harness's; dqn_jax (-m slow): a replay buffer
def test_a_run_writes_its_whole_directory_and_a_stopped_moved_resumed_run_ends_the_same(script, tmp_path):
    """Three seeds sharded over 2 CPU devices (padded to 4 slots), with every output on:
    TensorBoard, metrics.jsonl, the plot, eval.json, the checkpoints, the model (which
    evaluate_saved_model reads back), the video and (ppo_jax_scan) the wandb mirror. Then the
    same run stopped by Ctrl-C or SIGTERM: it finishes the chunk in flight, checkpoints and
    exits 128 + the signal; its directories are moved, seed 1's is renamed, and --resume (without
    --cpu-devices: the run's 2 devices, where the default would give 3 seeds 3) continues it to the
    uninterrupted run's bits, its evaluation curve (--eval-frequency)
    included. The same seeds on 1 device end the same, to float tolerance. Last, a corrupt
    newest checkpoint: the resume falls back to the one before it."""
    module, contract = load_script(script), SCRIPTS[script]
    three_seeds = [*contract.run, "--num-seeds", "3", "--cpu-devices", "2", "--eval-frequency", "300"]
    # The wandb mirror is harness code, the same text in every script, and wandb's offline
    # service takes seconds per run: one script checks it.
    track = ["--track"] if script == "ppo_jax_scan" else []
    extra = ["--save-model", "--capture-video", *track, "--exp-name", "tiny"]
    result = run_script(script, *three_seeds, *extra, "--output-dir", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr
    assert "3 seed(s) on 2 device(s)" in result.stdout
    runs = seed_dirs(tmp_path / "a")
    run_dir = runs[0]
    assert [d.name.split("__")[:3] for d in runs] == [[contract.env_id, "tiny", s] for s in "123"]
    record = json.loads((run_dir / "args.json").read_text())
    algo = module.make_algorithm(run_args(module, run_dir))
    assert set(record["sizes"]) == set(algo.sizes._fields)
    assert {d.name.rsplit("__", 1)[1] for d in runs} == {record["run_stamp"]}  # siblings differ by seed
    total = algo.num_iterations * algo.env_steps_per_iteration

    points = read_jsonl(run_dir / "metrics.jsonl")
    steps = [p["global_step"] for p in points]
    assert steps == sorted(steps) and steps[0] > 0 and steps[-1] == total
    tags = set(algo.metric_tags.values()) | {"charts/SPS", "eval/episodic_return"}
    assert tags <= set(read_events(run_dir)) and tags <= {k for p in points for k in p}
    losses = [v for p in points for k, v in p.items() if k.startswith("losses/")]
    assert losses and all(math.isfinite(v) for v in losses)  # gradient steps were taken

    per_chunk = total // len([p for p in points if "charts/SPS" in p])  # env steps of one chunk
    evaluated = [p["global_step"] for p in points if "eval/episodic_return" in p]
    crossings = [s for s in range(per_chunk, total, per_chunk) if s // 300 > (s - per_chunk) // 300]
    assert evaluated == [*crossings, total] and len(evaluated) >= 2, (evaluated, per_chunk)
    curves = []
    for seed_dir in runs:
        evaluation = json.loads((seed_dir / "eval.json").read_text())
        assert evaluation["episodes"] == len(evaluation["returns"]) == 4
        assert evaluation["global_step"] == total
        curves.append(evaluation["eval_curve"])
        assert [p["global_step"] for p in curves[-1]] == evaluated
        assert curves[-1][-1]["mean"] == evaluation["mean"]
        checkpoints = sorted(p.name for p in (seed_dir / "checkpoints").iterdir())
        assert checkpoints[-1] == f"step_{total:012d}.msgpack" and len(checkpoints) == 2, checkpoints
        check_gif(seed_dir / "videos" / "eval.gif")
    from PIL import Image

    with Image.open(run_dir / "episodic_return.png") as image:
        assert image.format == "PNG" and min(image.size) > 100
    assert (run_dir / "wandb").is_dir() == bool(track)
    reloaded = module.evaluate_saved_model(module.Flags, run_dir, episodes=3)
    assert len(reloaded["returns"]) == 3 and math.isfinite(reloaded["mean"])
    assert "eval return" in result.stdout
    uninterrupted = [read_state(module, d) for d in runs]

    process = start_script(script, *three_seeds, "--output-dir", str(tmp_path / "b"))
    out = interrupt_after_compiling(process, contract.stop_signal)
    assert "--resume" in out
    interrupted = seed_dirs(tmp_path / "b")
    assert not (interrupted[0] / "eval.json").exists()
    iterations_done, _ = read_state(module, interrupted[0])
    shutil.copytree(tmp_path / "b", tmp_path / "elsewhere")
    shutil.rmtree(tmp_path / "b")
    moved = tmp_path / "elsewhere" / "best_run"
    (tmp_path / "elsewhere" / interrupted[0].name).rename(moved)
    resumed = run_script(script, "--resume", str(moved))
    assert resumed.returncode == 0, resumed.stderr
    siblings = [moved] + [tmp_path / "elsewhere" / d.name for d in interrupted[1:]]
    for (iterations_a, a), seed_dir in zip(uninterrupted, siblings, strict=True):
        iterations_b, b = read_state(module, seed_dir)
        assert iterations_a == iterations_b > iterations_done
        assert tree_equal(a, b), f"{seed_dir.name}: the resumed run differs from the uninterrupted one"
    for curve, seed_dir in zip(curves, siblings, strict=True):
        assert json.loads((seed_dir / "eval.json").read_text())["eval_curve"] == curve
    resumed_points = read_jsonl(moved / "metrics.jsonl")
    steps = [p["global_step"] for p in resumed_points if "charts/SPS" in p]
    assert steps == sorted(set(steps)) and len(resumed_points) == len(points)  # logged once each

    one_device = run_script(script, *contract.run, "--num-seeds", "3", "--cpu-devices", "1",
                            "--output-dir", str(tmp_path / "c"))  # fmt: skip
    assert one_device.returncode == 0, one_device.stderr
    assert "3 seed(s) on 1 device(s)" in one_device.stdout
    for (_, a), seed_dir in zip(uninterrupted, seed_dirs(tmp_path / "c"), strict=True):
        b = read_state(module, seed_dir)[1]
        for x, y in zip(module.jax.tree.leaves(a), module.jax.tree.leaves(b), strict=True):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            np.testing.assert_allclose(x, y, rtol=1e-3, atol=contract.device_atol)

    newest = sorted((moved / "checkpoints").glob("step_*.msgpack"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    args = module.resume_args(module.Flags(resume=str(moved)))
    restored_iterations, _ = module.restore_checkpoints(module.open_run_dirs(module.plan_runs(args))[0])
    assert restored_iterations < uninterrupted[0][0]


@pytest.fixture(scope="module")
def a_finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """7 iterations in chunks of 3, 3 and 1, evaluated every 192 env steps; each test resumes a copy.
    Its last chunk is short, so its final checkpoint lies off the chunk grid."""
    out = tmp_path_factory.mktemp("finished")
    budget = flags(num_envs=4, num_steps=16, total_timesteps=64 * 7, num_chunks=3, eval_episodes=3)
    first = run_script("ppo_jax_scan", *budget, "--eval-frequency", "192", "--output-dir", str(out))
    assert first.returncode == 0, first.stderr
    return only_run_dir(out)


def test_a_run_resumed_from_an_older_checkpoint_logs_each_step_once(
    a_finished_run, tmp_path, monkeypatch, capsys
):
    """A finished run whose newest checkpoint is corrupt resumes from the one before and logs the
    last chunk again: metrics.jsonl keeps one row per step, and TensorBoard's reader hides the
    first session's events after the checkpoint (a SessionLog START at the resumed step). The
    harness is the same in every script: one suffices."""
    run_dir = copy_of_run(a_finished_run, tmp_path)
    newest = sorted((run_dir / "checkpoints").glob("step_*.msgpack"))[-1]
    newest.write_bytes(b"not a checkpoint")
    main_in_process(load_script("ppo_jax_scan"), ["--resume", str(run_dir)], monkeypatch, capsys)
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2  # one file per session
    rows = [p for p in read_jsonl(run_dir / "metrics.jsonl") if "losses/value_loss" in p]
    assert [p["global_step"] for p in rows] == list(range(64, 64 * 8, 64))  # one row per iteration
    events = read_events(run_dir)["losses/value_loss"]
    assert [step for step, _ in events] == [p["global_step"] for p in rows]
    assert np.allclose([value for _, value in events], [p["losses/value_loss"] for p in rows])


def test_a_finished_run_resumed_trains_nothing_and_logs_nothing_twice(
    a_finished_run, tmp_path, monkeypatch, capsys
):
    """A user resumes a finished run to save its model. Its final checkpoint lies off the chunk grid:
    the resume must not run that chunk again. The checkpoint, eval.json and metrics.jsonl stay as
    they were, TensorBoard keeps one point per step, and the model written evaluates as eval.json
    did. The harness is the same in every script: one suffices."""
    module = load_script("ppo_jax_scan")
    run_dir = copy_of_run(a_finished_run, tmp_path)
    files = ["eval.json", "metrics.jsonl", f"checkpoints/step_{64 * 7:012d}.msgpack"]
    before = {name: (run_dir / name).read_bytes() for name in files}
    resumed = main_in_process(module, ["--resume", str(run_dir), "--save-model"], monkeypatch, capsys)
    assert {name: (run_dir / name).read_bytes() for name in files} == before
    assert "finished at step 448" in resumed and "compiled" not in resumed  # nothing trains
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1  # nor logs
    for tag, points in read_events(run_dir).items():
        steps = [step for step, _ in points]
        assert steps == sorted(set(steps)), (tag, steps)
    evaluation = json.loads(before["eval.json"])
    assert [p["global_step"] for p in evaluation["eval_curve"]] == [192, 384, 448]
    assert module.evaluate_saved_model(module.Flags, run_dir)["returns"] == evaluation["returns"]


def test_eval_frequency_cuts_the_training_into_enough_chunks(tmp_path):
    """--eval-frequency N needs a chunk end by every N env steps: the chunks become more when
    --num-chunks gives fewer, never fewer. The harness is the same in every script: one suffices."""
    module = load_script("ppo_jax_scan")
    budget = dict(total_timesteps=64 * 40, num_envs=4, num_steps=16)  # 40 iterations

    def plan(**flags: int) -> tuple[int, int]:  # (iterations per chunk, chunks); a new directory each
        output_dir = tmp_path / "-".join(f"{k}{v}" for k, v in flags.items())
        run = module.plan_runs(module.Flags(**budget, **flags, output_dir=str(output_dir)))[0]
        return run.iterations_per_chunk, run.num_chunks

    assert plan(num_chunks=2) == (20, 2)
    assert plan(num_chunks=2, eval_frequency=64 * 10) == (10, 4)  # an evaluation every 10 iterations
    assert plan(num_chunks=8, eval_frequency=64 * 10) == (5, 8)
    assert plan(num_chunks=2, eval_frequency=10**9) == (20, 2)


def test_the_evaluation_curve_rises_where_the_training_curve_rises(tmp_path):
    """A tiny CartPole run (60k steps, 8 envs; the README command's 500k reach 500) with
    --eval-frequency 6000: an evaluation at each of its 10 chunk ends. Both curves climb, the
    evaluation's from about 140 to 500, and they move together over the evaluation points."""
    tiny = [
        "--num-envs",
        "8",
        "--total-timesteps",
        "60000",
        "--eval-frequency",
        "6000",
        "--eval-episodes",
        "8",
    ]
    result = run_script("ppo_jax_scan", *tiny, "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    points = read_jsonl(seed_dirs(tmp_path)[0] / "metrics.jsonl")
    evals = [p for p in points if "eval/episodic_return" in p]
    training = {
        p["global_step"]: p["charts/episodic_return"] for p in points if "charts/episodic_return" in p
    }
    eval_returns = np.array([p["eval/episodic_return"] for p in evals])
    train_returns = np.array([training[p["global_step"]] for p in evals])  # logged at the same steps
    assert len(evals) == 10 and eval_returns[-3:].mean() > eval_returns[0] + 100, eval_returns
    assert train_returns[-3:].mean() > train_returns[0] + 50, train_returns
    assert np.corrcoef(eval_returns, train_returns)[0, 1] > 0.3, (eval_returns, train_returns)


def test_the_driver_writes_out_a_chunk_while_the_next_one_runs(tmp_path, monkeypatch):
    """train_chunks dispatches chunk k+1 before it brings chunk k's metrics to the host and before it
    checkpoints chunk k, so the transfers, the logging and the checkpoints overlap the training (on a
    GPU the transfers alone, made first, took 1.24x PureJaxRL's time at 2048 envs: docs/gpu.md). The
    harness is the same in every script: one suffices."""
    module, events = load_script("ppo_jax_scan"), []
    compile_chunk, save_checkpoint, to_host = module.compile_chunk, module.save_checkpoint, module.to_host

    def recording_compile_chunk(run: Any, state: Any) -> Any:
        chunk = compile_chunk(run, state)

        def dispatch(state: Any, first_unit: np.int32) -> Any:
            events.append(("dispatch", int(first_unit)))
            return chunk(state, first_unit)

        return dispatch

    def recording_save_checkpoint(run_dir: Path, iterations_done: int, *rest: Any) -> None:
        events.append(("checkpoint", iterations_done))
        save_checkpoint(run_dir, iterations_done, *rest)

    def recording_to_host(tree: Any) -> Any:
        if isinstance(tree, dict) and "losses/value_loss" in tree:  # a chunk's metrics, tag -> [S, I]
            events.append(("metrics", 8 * (1 + sum(e[0] == "metrics" for e in events))))  # its chunk's end
        return to_host(tree)

    monkeypatch.setattr(module, "compile_chunk", recording_compile_chunk)
    monkeypatch.setattr(module, "save_checkpoint", recording_save_checkpoint)
    monkeypatch.setattr(module, "to_host", recording_to_host)
    few_chunks = [*SCRIPTS["ppo_jax_scan"].run, "--num-chunks", "4", "--output-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", ["ppo_jax_scan.py", *few_chunks, *session_cache()])
    module.main(module.Flags)
    # 30 iterations in 4 chunks of 8, each past a tenth of the run: every chunk end checkpoints, after
    # the next chunk is dispatched (the writer thread's checkpoint may come after a later dispatch too)
    assert sorted(e for e in events if e[0] != "metrics") == [("checkpoint", 8), ("checkpoint", 16),
        ("checkpoint", 24), ("checkpoint", 30), ("dispatch", 0), ("dispatch", 8), ("dispatch", 16),
        ("dispatch", 24)]  # fmt: skip
    assert [e for e in events if e[0] == "metrics"][:3] == [("metrics", 8), ("metrics", 16), ("metrics", 24)]
    for done in (8, 16, 24):
        assert events.index(("dispatch", done)) < events.index(("metrics", done)), events
        assert events.index(("dispatch", done)) < events.index(("checkpoint", done)), events


@pytest.mark.parametrize(
    ("every", "saved"),
    [
        (None, [8, 16, 24, 30]),  # the default, a tenth of the run (192 steps): every chunk end
        (64 * 20, [24, 30]),  # the first chunk end past 20 iterations, and the end
        (10**12, [30]),  # none before the end
    ],
)
def test_the_state_leaves_the_device_only_for_a_checkpoint(every, saved, tmp_path, monkeypatch):
    """--checkpoint-frequency N (env steps) checkpoints at the first chunk end past each multiple of N,
    and always at the end; the metrics come to the host after every chunk, the state only for a
    checkpoint (the chunk checks it for non-finite values on the device). 30 iterations of 64 steps
    in 4 chunks of 8."""
    module, checkpoints, states_moved = load_script("ppo_jax_scan"), [], []
    save_checkpoint, to_host, compile_chunk = module.save_checkpoint, module.to_host, module.compile_chunk
    state_type: list[type] = []  # the state's NamedTuple, as the chunk is compiled for it

    def recording_compile_chunk(run: Any, state: Any) -> Any:
        state_type.append(type(state))
        return compile_chunk(run, state)

    def recording_save_checkpoint(run_dir: Path, iterations_done: int, *rest: Any) -> None:
        checkpoints.append(iterations_done)
        save_checkpoint(run_dir, iterations_done, *rest)

    def recording_to_host(tree: Any) -> Any:
        states_moved.append(isinstance(tree, tuple(state_type)))
        return to_host(tree)

    monkeypatch.setattr(module, "compile_chunk", recording_compile_chunk)
    monkeypatch.setattr(module, "save_checkpoint", recording_save_checkpoint)
    monkeypatch.setattr(module, "to_host", recording_to_host)
    frequency = [] if every is None else ["--checkpoint-frequency", str(every)]
    few_chunks = [
        *SCRIPTS["ppo_jax_scan"].run,
        "--num-chunks",
        "4",
        *frequency,
        "--output-dir",
        str(tmp_path),
    ]
    monkeypatch.setattr(sys, "argv", ["ppo_jax_scan.py", *few_chunks, *session_cache()])
    module.main(module.Flags)
    assert checkpoints == saved
    assert sum(states_moved) == len(saved), states_moved  # one transfer of the state per checkpoint


@pytest.mark.parametrize(("name", "chunk_level"), [("ppo_jax_scan", 1), ("dqn_jax", None)])
def test_each_program_compiles_at_its_xla_level_on_a_cpu(name, chunk_level, tmp_path, monkeypatch):
    """Init and the evaluation run once: level 0. The chunk: the level its algorithm asks for,
    1 for PPO (about 1 s less compile, the same run time: docs/ppo_jax_scan.md), XLA's default
    (None) for the others, e.g. DQN (its chunk ran 2-4% slower at level 1)."""
    module, levels = load_script(name), []
    seeds_program = module.seeds_program

    def recording(per_seed: Any, inputs: tuple, level: Any, *rest: Any, **jit: Any) -> Any:
        levels.append(level)
        return seeds_program(per_seed, inputs, level, *rest, **jit)

    monkeypatch.setattr(module, "seeds_program", recording)
    run = module.plan_runs(module.Flags(**SCRIPTS[name].budgets(2048, 2), output_dir=str(tmp_path)))[0]
    state = module.initial_state(run, None)
    module.compile_chunk(run, state)
    module.compile_evaluate(run, state)
    assert levels == [0, chunk_level, 0]


def test_a_lone_seed_runs_unbatched_and_keeps_its_seed_axis(monkeypatch):
    """One seed's program is per_seed on the inputs' only row, not a vmap of it (a batch of one trains
    6-8% slower on XLA CPU: docs/harness.md); unbatched inputs pass as they are. Two seeds vmap (with
    no mesh, or two to a device; one run per device is test_sweep's bitwise check)."""
    module, vmapped = load_script("ppo_jax_scan"), []
    vmap = jax.vmap
    monkeypatch.setattr(jax, "vmap", lambda *a, **k: vmapped.append(k) or vmap(*a, **k))
    per_seed = lambda x, scale: (x @ jnp.arange(9.0).reshape(3, 3) * scale, x.sum())
    for seeds in (1, 2):
        x = np.arange(3.0 * seeds, dtype=np.float32).reshape(seeds, 3)  # [S, 3]
        out = module.seeds_program(per_seed, (x, np.float32(2)), None, (0, None))(x, np.float32(2))
        assert [leaf.shape for leaf in out] == [(seeds, 3), (seeds,)]
        for i in range(seeds):  # each seed's row, as per_seed alone computes it
            alone = jax.jit(per_seed)(x[i], np.float32(2))
            np.testing.assert_allclose(np.asarray(out[0][i]), np.asarray(alone[0]), rtol=1e-6)
            assert float(out[1][i]) == float(alone[1])
        assert len(vmapped) == seeds - 1  # no vmap for one seed, one for two


def test_a_non_finite_run_stops_and_keeps_its_checkpoints(tmp_path, capsys, monkeypatch):
    script = "ppo_jax_scan"
    contract = SCRIPTS[script]
    bad = [*contract.run, *contract.non_finite, "--output-dir", str(tmp_path)]
    code, _ = exit_of_main(load_script(script), bad, monkeypatch, capsys)
    assert str(code).startswith("error: non-finite loss or parameters in every run: "), code
    run_dir = only_run_dir(tmp_path)
    assert not (run_dir / "eval.json").exists()
    assert not list(run_dir.glob("checkpoints/*.tmp"))


def test_a_checkpoint_of_its_state_resumes_it_bitwise(script, tmp_path):
    """What a resume does, in one process: chunk 1, each run's state through save_checkpoint and
    read_checkpoint, initial_state, chunk 2; it ends as chunks 1 and 2 run straight. Every part of
    the state must come back (a replay buffer, the normalisers, the RNG keys, the env state) with its
    dtype and layout, or the program or the numbers differ. Two seeds on one device (a vmapped
    batch). The signal, the files and the moved directories are the harness's: tested on ppo_jax_scan
    and dqn_jax above."""
    module, contract = load_script(script), SCRIPTS[script]
    flags = [*contract.run, "--num-seeds", "2", "--output-dir", str(tmp_path)]
    args = module.parse_flags(module.Flags, flags)
    run = module.open_run_dirs(module.plan_runs(args))[0]
    try:
        state = module.initial_state(run, None)
        chunk, first = module.compile_chunk(run, state), run.iterations_per_chunk
        after_one = chunk(state, np.int32(0)).state
        host = module.to_host(after_one)
        for i, run_dir in enumerate(run.dirs):
            module.save_checkpoint(
                run_dir, first, first * run.algo.env_steps_per_iteration, module.seed_slice(host, i)
            )
        resumed_run = run._replace(args=dataclasses.replace(args, resume=str(run.dirs[0])))
        done, restored = module.restore_checkpoints(resumed_run)
        assert done == first
        restored = module.initial_state(run, restored)
        # Read from host arrays, it must have the fresh state's strong types and the mesh's shardings
        # (a gymnax EnvState's time starts as a weakly typed 0), or the resume compiles another program.
        layout = lambda state: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type, x.sharding), state)
        assert layout(restored) == layout(state)
        resumed = chunk(restored, np.int32(first)).state
        assert tree_equal(resumed, chunk(after_one, np.int32(first)).state)
    finally:
        module.release_claims()
