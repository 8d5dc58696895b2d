"""benchmark/speed.py's pure pieces: the rnn and td3 settings, their budgets, the flags each side
gets, and their rows of the table (nothing runs a peer or times anything);
benchmark.oneoff.driver_overhead's output, from a tiny run."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys

import pytest
from _helpers import ROOT, load_file, session_cache

sys.path.insert(0, str(ROOT))  # the harness is a package of the repository, not installed
speed = importlib.import_module("benchmark.speed")
inprocess = importlib.import_module("benchmark.inprocess")


def test_scaled_changes_only_the_budget():
    assert speed.scaled(speed.RNN, 1.0) == speed.RNN
    quick = speed.scaled(speed.TD3, 0.2)
    assert quick["total_timesteps"] == 2_000
    assert {k: v for k, v in quick.items() if k != "total_timesteps"} == {
        k: v for k, v in speed.TD3.items() if k != "total_timesteps"
    }
    assert speed.scaled({"total_timesteps": 10}, 0.0)["total_timesteps"] == 1


def test_our_settings_are_args_fields_and_survive_the_command_line():
    for script, settings in (("ppo_rnn_jax", speed.RNN), ("td3_jax", speed.TD3)):
        module = importlib.import_module(f"vibe_rl.{script}")
        assert inprocess.parse_settings(module.Flags, speed.set_items(settings)) == settings
        module.make_algorithm(module.Flags(**settings))  # a valid configuration (checks every flag)


def test_peer_flags_are_flags_the_runners_take():
    assert speed.flags({"num_envs": 4, "learning_rate": 2.5e-4}, ("num_envs", "learning_rate")) == [
        "--num-envs",
        "4",
        "--learning-rate",
        "0.00025",
    ]
    path = ROOT / "benchmark" / "peers" / "common.py"  # numpy only at the top: loads here
    common = load_file(path, "peers_common")
    assert {name.replace("_", "-") for name in speed.RNN_PEER_FLAGS} <= set(common.PPO_FLAGS)
    # rejax_td3.py imports rejax (the peers venv): read its flag table from the source
    tree = ast.parse((ROOT / "benchmark" / "peers" / "rejax_td3.py").read_text())
    table = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "FLAG_TO_CONFIG" for t in node.targets)
    )
    assert set(speed.TD3_PEER_FLAGS) == {ast.literal_eval(key) for key in table.keys}


def test_table_has_the_rnn_and_td3_rows():
    def variant(train_s: float, compile_s: float) -> dict:
        return {"train_s": train_s, "compile_s": compile_s, "wall_s": train_s + compile_s, "samples": []}

    results = {
        "rnn": {"vibe_rl": variant(3.0, 10.0), "PureJaxRL": variant(2.0, 6.0)},
        "td3": {"vibe_rl": variant(1.0, 5.0), "rejax": variant(4.0, 7.0)},
    }
    text = speed.table(results)
    rnn = "| PPO-GRU training, PureJaxRL ppo_rnn.py's CartPole config, one jit |"
    assert rnn + " 3.00 s | PureJaxRL 2.00 s | 1.50 |" in text
    assert "| TD3 training, rejax's Pendulum-v1 config, one jit | 1.00 s | rejax 4.00 s | 0.25 |" in text
    assert "vibe_rl 5.00 s, rejax 7.00 s" in text
    assert "PPO-GRU" not in speed.table({"rnn": {"vibe_rl": variant(3.0, 10.0)}})  # no peer: no row


@pytest.mark.slow  # 10 s: two programs compiled and timed
def test_driver_overhead_prints_the_pieces_and_the_bar_line():
    """benchmark.oneoff.driver_overhead with one --num-seeds: a table row of the pieces, then the bar's
    line with both numbers (a reduced budget: 2 seeds, 8 PPO iterations, one repeat; no figure is checked)."""
    command = [sys.executable, "-m", "benchmark.oneoff.driver_overhead", "--num-seeds", "2",
               "--ppo-steps", "4096", "--repeats", "1", *session_cache()]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    row = next(line for line in lines if line.startswith("| PPO CartPole | 2 |"))
    assert len(row.strip("|").split("|")) == 15 and "nan" not in row, row
    last = re.fullmatch(
        r"PPO CartPole, 2 seeds: host work ([\d.]+) ms per chunk that checkpoints; "
        r"not overlapped ([\d.]+) ms per chunk = ([\d.]+)% of the chunk's compute \(([\d.]+) ms\); "
        r"the bar, at most 10%: (met|NOT met)",
        lines[-1],
    )
    assert last and float(last[1]) > 0 and float(last[4]) > 0, lines[-1]
    assert (last[5] == "met") == (float(last[3]) <= 10), lines[-1]
