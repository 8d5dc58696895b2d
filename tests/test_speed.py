"""benchmark/speed.py's pure pieces: the rnn and td3 settings, their budgets, the flags each side
gets, and their rows of the table. Nothing here runs a peer or times anything."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

from _helpers import ROOT, load_file

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
        assert inprocess.parse_settings(module.Args, speed.set_items(settings)) == settings
        module.make_algorithm(module.Args(**settings))  # a valid configuration (checks every flag)


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
