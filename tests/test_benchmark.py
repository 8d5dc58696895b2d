"""The benchmark harness (benchmark/run.py): the suite, failure reporting, the outputs.

Fast tests run the harness on a tiny fake script that writes a run directory the way the
real scripts do (no jax, a fraction of a second each). The slow test runs the real quick
preset on PPO.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _helpers import ROOT

sys.path.insert(0, str(ROOT))  # the harness is a package of the repository, not installed
bench = importlib.import_module("benchmark.run")  # the runner
suite_module = importlib.import_module("benchmark.suite")
results = importlib.import_module("benchmark.results")

FAKE_SCRIPT = '''
"""A fake training script: the CLI conventions and run directory of vibe_rl's scripts."""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

p = argparse.ArgumentParser()
for name in ("--env-id", "--exp-name", "--output-dir"):
    p.add_argument(name)
for name in ("--seed", "--num-seeds", "--total-timesteps", "--num-envs", "--eval-frequency"):
    p.add_argument(name, type=int, default=1)
p.add_argument("--fake-return", type=float, default=100.0)
p.add_argument("--fake-mode", default="ok")
args = p.parse_args()
if args.fake_mode == "crash":
    sys.exit("Traceback: something broke")
if args.fake_mode == "hang":  # a child of its own too, as a script's compile workers may be
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(f"pids {os.getpid()} {grandchild.pid}", flush=True)
    time.sleep(60)
print("compiled one chunk (1 updates x 4 steps, 1 seed(s)) in 0.5s")
for seed in range(args.seed, args.seed + args.num_seeds):
    run_dir = Path(args.output_dir) / f"{args.env_id}__{args.exp_name}__{seed}__0"
    run_dir.mkdir(parents=True)
    record = {"num_envs": args.num_envs, "exp_name": args.exp_name, "eval_frequency": args.eval_frequency}
    (run_dir / "args.json").write_text(json.dumps(record))
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(1, 5):
            step = i * args.total_timesteps // 4
            point = {"global_step": step, "charts/episodic_return": args.fake_return * i / 4 + seed}
            f.write(json.dumps({**point, "charts/SPS": 1000.0}) + "\\n")
    if args.fake_mode != "no-eval":
        mean = args.fake_return + seed
        curve = [{"global_step": args.total_timesteps // 2, "mean": mean / 2},
                 {"global_step": args.total_timesteps, "mean": mean}]
        (run_dir / "eval.json").write_text(json.dumps({"returns": [mean], "lengths": [1], "mean": mean,
                                                       "std": 0.0, "episodes": 1, "eval_curve": curve}))
'''


def write_suite(tmp_path: Path, entries: str) -> Path:
    script = tmp_path / "fake_algo.py"
    script.write_text(FAKE_SCRIPT)
    suite = tmp_path / "suite.toml"
    header = f"[defaults]\nseeds = 2\nquick_seeds = 1\ntimeout = 20\nquick_timeout = 20\n\n# {script}\n"
    suite.write_text(header + textwrap.dedent(entries).replace("FAKE", str(script)))
    return suite


def run_harness(tmp_path: Path, suite: Path, *flags: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    preset = [] if "--quick" in flags else ["--full"]  # without a preset the runner takes the quick one
    code = bench.main(
        ["--suite", str(suite), "--out", str(out), "--no-ceiling", "--no-seed-scaling", *preset, *flags]
    )
    return code, json.loads((out / "results.json").read_text())


def test_suite_file_parses_and_covers_the_issue():
    suite = suite_module.load_suite()
    full = {(e.name, e.env) for e in suite_module.select_entries(suite, quick=False)}
    assert {
        ("ppo_jax_scan", "CartPole-v1"),
        ("ppo_jax_scan", "Acrobot-v1"),
        ("ppo_jax_scan", "Pendulum-v1"),
        ("ppo_jax_scan", "Breakout-MinAtar"),
        ("dqn_jax", "CartPole-v1"),
        ("dqn_jax", "Breakout-MinAtar"),
        ("sac_jax", "Pendulum-v1"),
        ("ppo_multigpu", "CartPole-v1"),
        ("pqn_jax", "CartPole-v1"),
        ("pqn_jax", "Breakout-MinAtar"),
    } <= full
    quick = suite_module.select_entries(suite, quick=True)
    scripts = {p.stem for p in (ROOT / "vibe_rl").glob("*.py")} - {"__init__"}
    assert {Path(e.script).stem for e in quick} == scripts  # every script is in the quick preset
    for entry in quick:  # a quick budget is no longer and its threshold lower than the full one
        (same,) = [
            e
            for e in suite_module.select_entries(suite, quick=False)
            if (e.name, e.env) == (entry.name, entry.env)
        ]
        assert entry.total_timesteps <= same.total_timesteps and entry.threshold < same.threshold
    assert suite["seed_scaling"]["seeds"] == [1, 8, 64]


def test_every_env_has_a_random_score_and_every_threshold_a_source():
    suite = suite_module.load_suite()
    for entry in suite_module.select_entries(suite, quick=False):
        assert entry.random_score is not None, entry.env  # suite.toml's [random] covers the suite
        assert entry.threshold_source, (entry.name, entry.env)  # the comment on its threshold line
        # [defaults] eval_points = 20; an entry that overrides it keeps a curve of 10 points or more
        assert entry.eval_frequency == entry.total_timesteps // entry.eval_points and entry.eval_points >= 10
    ppo, masked = suite_module.select_entries(
        suite, quick=False, algos=["ppo_jax_scan"], envs=["CartPole-v1"]
    )
    assert ppo.threshold_source.startswith("[gymnasium] solved at 475") and not ppo.below
    assert masked.variant == "masked" and masked.below  # the feed-forward contrast to ppo_rnn_jax
    (quick,) = suite_module.select_entries(suite, quick=True, algos=["ppo_jax_scan"], envs=["CartPole-v1"])
    assert quick.threshold_source.startswith("quick smoke threshold")
    # an entry's own seeds (3 where a seed costs over 5 minutes) are the full preset's, not --quick's
    (raw,) = [e for e in suite["entry"] if e["script"].endswith("td3_jax.py") and e["env"] == "Pendulum-v1"]
    raw["seeds"] = 3  # no entry with a quick table has its own seeds today
    (full,) = suite_module.select_entries(suite, quick=False, algos=["td3_jax"], envs=["Pendulum-v1"])
    (quick,) = suite_module.select_entries(suite, quick=True, algos=["td3_jax"], envs=["Pendulum-v1"])
    assert (full.seeds, quick.seeds) == (3, suite["defaults"]["quick_seeds"])
    assert all(e.seeds == 5 for e in suite_module.select_entries(suite, quick=False, envs=["CartPole-v1"]))


def test_select_entries_filters_and_overrides():
    suite = suite_module.load_suite()
    ppo = suite_module.select_entries(
        suite, quick=False, algos=["ppo"], envs=["CartPole-v1"], seeds=5, timeout=7
    )
    assert {e.name for e in ppo} == {
        "ppo_jax_scan",
        "ppo_jax_scan (masked)",
        "ppo_multigpu",
        "ppo_rnn_jax",
        "ppo_rnn_jax (masked)",
    }
    assert all(e.seeds == 5 and e.timeout == 7 and e.env == "CartPole-v1" for e in ppo)
    (ppo,) = suite_module.select_entries(
        suite, quick=True, algos=["ppo_jax_scan"], envs=["CartPole-v1"], eval_points=0
    )
    assert ppo.eval_frequency == 0  # --eval-points 0: no evaluation curve
    (dqn,) = suite_module.select_entries(suite, quick=True, algos=["dqn_jax"])
    assert dqn.flags["learning-starts"] < 10_000  # the quick table's flags override the full ones


def test_without_the_playground_extra_its_entries_are_skipped_and_said(tmp_path, monkeypatch, capsys):
    """The README's install has no `playground` extra: the runner leaves its entries out, says so in
    one line each, and runs the rest; with the extra, it keeps them."""
    find_spec = importlib.util.find_spec
    installed = {"mujoco_playground": False}

    def find(name: str, *rest: object) -> object:
        if name == "mujoco_playground":
            return object() if installed[name] else None
        return find_spec(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", find)
    entries = fake_entry("Good-v0", 50.0) + fake_entry("playground/CartpoleBalance", 0.0)
    suite = write_suite(tmp_path, entries)
    code, report = run_harness(tmp_path, suite)
    assert code == 0 and [r["env"] for r in report["entries"]] == ["Good-v0"]
    said = "skipped fake_algo on playground/CartpoleBalance: pip install -e '.[playground]' to run it"
    assert said in capsys.readouterr().out.splitlines()
    installed["mujoco_playground"] = True
    selected = suite_module.select_entries(suite_module.load_suite(suite), quick=False)
    assert [e.env for e in bench.installed_entries(selected)] == ["Good-v0", "playground/CartpoleBalance"]


def test_flag_list_spells_tyro_flags():
    flags = {"num-envs": 8, "normalize-obs": True, "anneal-lr": False, "learning-rate": 1e-3}
    assert suite_module.flag_list(flags) == [
        "--num-envs",
        "8",
        "--normalize-obs",
        "--no-anneal-lr",
        "--learning-rate",
        "0.001",
    ]


def test_commands_page_is_current_and_its_commands_are_the_suites_less_the_harness_flags():
    commands = importlib.import_module("benchmark.commands")
    assert (ROOT / "docs" / "commands.md").read_text() == commands.page(), "run python -m benchmark.commands"
    suite = suite_module.load_suite()
    (cartpole,) = [
        e
        for e in suite_module.select_entries(suite, quick=False, algos=["ppo_jax_scan"])
        if e.name == "ppo_jax_scan" and e.env == "CartPole-v1"
    ]
    assert commands.command(cartpole) == (
        "python vibe_rl/ppo_jax_scan.py --env-id CartPole-v1 --total-timesteps 500000 --num-seeds 5 \\\n"
        "    --num-envs 8"
    )
    for entry in suite_module.select_entries(suite, quick=False):  # every flag the suite runs with is in it
        text = commands.command(entry).replace(" \\\n    ", " ")
        ran = " ".join(suite_module.entry_flags(entry))
        for flag in commands.HARNESS_ONLY:
            ran = re.sub(rf"{flag} \S+ ?", "", ran)
        assert text == f"python {entry.script} {ran.strip()}"


def fake_entry(env: str, threshold: float, script: str = "FAKE", timeout: float = 20, **flags: object) -> str:
    """One [[entry]] of a suite running the fake script; keyword flags become --kebab-case flags."""
    table = ", ".join(f"{k.replace('_', '-')} = {json.dumps(v)}" for k, v in flags.items())
    return (
        f'[[entry]]\nscript = "{script}"\nenv = "{env}"\ntotal_timesteps = 400\n'
        f"threshold = {threshold}\ntimeout = {timeout}\nflags = {{ {table} }}\n\n"
    )


def pids_in(log: Path, wait_s: float = 0.0) -> list[int]:
    """The pids a hanging fake script printed to its log (itself and its child), waiting up to wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        found = re.search(r"^pids (\d+) (\d+)$", log.read_text() if log.is_file() else "", re.M)
        if found or time.monotonic() > deadline:
            assert found, f"no pids in {log}"
            return [int(found[1]), int(found[2])]
        time.sleep(0.1)


def still_running(pids: list[int], wait_s: float = 5.0) -> list[int]:
    """The pids that still run after wait_s (a zombie, dead and not yet reaped, does not run)."""

    def running(pid: int) -> bool:
        stat = Path(f"/proc/{pid}/stat")
        if Path("/proc/self/stat").is_file():  # Linux: the state letter follows the name's ")"
            return stat.is_file() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + wait_s
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if running(pid)]


def test_every_failure_kind_is_reported_and_the_others_still_run(tmp_path):
    entries = [
        fake_entry("Good-v0", 50.0, fake_return=100.0, num_envs=4),
        fake_entry("Weak-v0", 500.0, fake_return=100.0),
        fake_entry("Crash-v0", 0.0, fake_mode="crash"),
        fake_entry("NoEval-v0", 0.0, fake_mode="no-eval"),
        fake_entry("Hang-v0", 0.0, timeout=2, fake_mode="hang"),
        fake_entry("CartPole-v1", 0.0, script="vibe_rl/no_such_script.py"),
        '[random]\n"Good-v0" = 1.0\n"Weak-v0" = 0.0\n',
    ]
    code, report = run_harness(tmp_path, write_suite(tmp_path, "".join(entries)))
    assert code == 1
    status = {r["env"]: r["status"] for r in report["entries"]}
    assert status == {
        "Good-v0": "pass",
        "Weak-v0": "fail",
        "Crash-v0": "crash",
        "NoEval-v0": "crash",
        "Hang-v0": "timeout",
        "CartPole-v1": "missing",
    }
    assert not still_running(
        pids_in(tmp_path / "out" / "logs" / "fake_algo__Hang-v0.log")
    )  # it, and its child
    good = report["entries"][0]
    assert good["seed_eval_means"] == [101.0, 102.0]  # 2 seeds, one subprocess
    assert good["eval_mean"] == pytest.approx(101.5) and good["eval_std"] == pytest.approx(0.5)
    assert good["iqm"] == pytest.approx(101.5)  # 2 seeds: the IQM is the mean
    assert good["iqm_ci95"][0] >= 101.0 and good["iqm_ci95"][1] <= 102.0
    assert good["normalised_scores"] == pytest.approx(
        [100 / 49, 101 / 49]
    )  # random 1 -> 0, threshold 50 -> 1
    assert good["eval_curves"][0] == [[200, 400], [50.5, 101.0]]  # each seed's eval.json eval_curve
    run_args = json.loads((Path(good["run_dirs"][0]) / "args.json").read_text())
    assert run_args["eval_frequency"] == 400 // 20  # the suite-wide default: 20 evaluations per run
    (aggregate,) = report["aggregates"]  # fake_algo over Good-v0 and Weak-v0 (the others did not run)
    assert (aggregate["script"], aggregate["envs"], aggregate["runs"]) == ("fake_algo", 2, 4)
    assert aggregate["normalised_iqm"] == pytest.approx((102 / 500 + 100 / 49) / 2)  # the middle 2 of 4
    low, high = aggregate["normalised_iqm_ci95"]
    assert low <= aggregate["normalised_iqm"] <= high
    assert good["compile_s"] == pytest.approx(0.5)
    assert good["env_steps_per_s"] == pytest.approx(2000.0)  # seeds x the logged charts/SPS
    assert good["num_envs"] == 4
    assert "something broke" in report["entries"][2]["note"]
    for key in ("jax", "jaxlib", "device_kind", "date", "hostname", "cpu_count"):
        assert key in report["machine"]

    table = (tmp_path / "out" / "results.md").read_text()
    for word in ("| fake_algo | Good-v0 | 2 |", "101.5 ± 0.5", "FAIL", "CRASH", "TIMEOUT", "MISSING"):
        assert word in table
    assert (tmp_path / "out" / "curves_Good-v0.png").stat().st_size > 1000
    assert (tmp_path / "out" / "profile.png").stat().st_size > 1000
    assert "| fake_algo | 2 | 4 |" in table  # the per-script aggregate


def test_all_passing_exits_zero_and_the_default_quick_preset_uses_the_quick_table(tmp_path):
    suite = write_suite(
        tmp_path,
        """
        [[entry]]
        script = "FAKE"
        env = "Good-v0"
        total_timesteps = 100_000
        threshold = 1000.0
        quick = { total_timesteps = 400, threshold = 10.0, flags = { fake-return = 20.0 } }

        [[entry]]
        script = "FAKE"
        env = "FullOnly-v0"
        total_timesteps = 400
        threshold = 1000.0
        """,
    )
    out = tmp_path / "out"  # no preset: the quick one (`python -m benchmark` alone takes minutes, not hours)
    code = bench.main(["--suite", str(suite), "--out", str(out), "--no-ceiling", "--no-seed-scaling"])
    report = json.loads((out / "results.json").read_text())
    assert code == 0 and report["preset"] == "quick"
    (entry,) = report["entries"]
    assert (entry["env"], entry["seeds"], entry["total_timesteps"], entry["status"]) == (
        "Good-v0",
        1,
        400,
        "pass",
    )
    assert entry["curves"][0][0] == [100, 200, 300, 400]


def test_a_contrast_entry_passes_when_it_stays_below_its_threshold(tmp_path):
    """`below = true`: the entry must fail to reach its threshold (a feed-forward policy on a task
    that needs memory); it has no normalised score, so the script's aggregate leaves it out."""

    def below(entry: str) -> str:
        return entry.replace("threshold", "below = true\nthreshold")

    contrast = below(fake_entry("Stays-v0", 200.0, fake_return=100.0))
    learns = below(fake_entry("Learns-v0", 200.0, fake_return=300.0))
    solved = fake_entry("Solved-v0", 50.0, fake_return=100.0)
    random = '[random]\n"Stays-v0" = 0.0\n"Learns-v0" = 0.0\n"Solved-v0" = 0.0\n'
    code, report = run_harness(tmp_path, write_suite(tmp_path, contrast + learns + solved + random))
    assert code == 1  # Learns-v0 reached the threshold it must stay below
    stays, learned, good = report["entries"]
    assert (stays["status"], learned["status"], good["status"]) == ("pass", "fail", "pass")
    assert stays["below"] and stays["seed_eval_means"] == [101.0, 102.0]
    assert stays["normalised_scores"] is None and learned["normalised_scores"] is None
    (aggregate,) = report["aggregates"]
    assert (aggregate["envs"], aggregate["runs"]) == (1, 2)  # Solved-v0 alone
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| < 200 | pass |" in table and "| < 200 | FAIL |" in table and "| 50 | pass |" in table


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_runner_and_its_child_and_writes_the_report_with_the_rest(tmp_path, signum):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal) while an entry trains: the runner kills
    that child and all it started, starts no other, writes the report of the entries that finished
    with the command that runs the rest, and exits 128 + the signal."""
    if (
        signal.getsignal(signum) == signal.SIG_IGN
    ):  # nohup pytest: the runner inherits the ignore, and keeps it
        pytest.skip(f"{signum.name} is ignored here")
    entries = [
        fake_entry("Done-v0", 50.0),
        fake_entry("Hang-v0", 0.0, timeout=120, fake_mode="hang"),
        fake_entry("Later-v0", 50.0),
    ]
    suite = write_suite(tmp_path, "".join(entries))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmark", "--full", "--suite", str(suite), "--out", str(out)]
    command += ["--no-ceiling", "--no-seed-scaling"]
    runner = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    try:
        pids = pids_in(out / "logs" / "fake_algo__Hang-v0.log", wait_s=120)
        runner.send_signal(signum)
        said, _ = runner.communicate(timeout=60)
        assert runner.returncode == 128 + signum, said
        assert not still_running(pids), said  # the child and its own child
        report = json.loads((out / "results.json").read_text())
        assert [r["env"] for r in report["entries"]] == ["Done-v0"] and report["entries"][0][
            "status"
        ] == "pass"
        stopped = report["stopped"]
        assert stopped["signal"] == signum.name
        assert stopped["rest"] == ["fake_algo__Hang-v0", "fake_algo__Later-v0"]  # the one cut short, the next
        assert f"`{stopped['command']}`" in (out / "results.md").read_text() and stopped["command"] in said
        assert not (out / "runs" / "fake_algo__Later-v0").exists()  # it never started
        words = shlex.split(stopped["command"])
        assert words[:4] == ["python", "-m", "benchmark", "--full"]
        args = bench.parse_args(words[3:])
        assert args.no_ceiling and args.no_seed_scaling
        rest = suite_module.select_entries(
            suite_module.load_suite(args.suite), False, tags=args.entries.split(",")
        )
        assert [e.tag for e in rest] == stopped["rest"]
    finally:
        runner.kill()
        for pid in still_running(pids, wait_s=0):
            os.kill(pid, signal.SIGKILL)


def test_docs_block_is_replaced_not_duplicated(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nhow to run\n")
    report = {"preset": "quick", "machine": {"backend": "cpu"}}
    plot = tmp_path / "curves_X.png"
    plot.write_bytes(b"png")
    results.update_docs(report, "| old |\n", [plot], docs)
    results.update_docs(report, "| new |\n", [plot], docs)
    text = docs.read_text()
    assert "how to run" in text and "| new |" in text and "| old |" not in text
    assert text.count("<!-- results:quick-cpu -->") == 1
    assert (tmp_path / "benchmarks" / "quick-cpu-curves_X.png").is_file()


def test_harness_runs_as_python_dash_m(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmark", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0 and "--quick" in result.stdout and "--peers" in result.stdout
    assert "--results-doc" in result.stdout


@pytest.mark.slow
def test_quick_preset_on_ppo_passes(tmp_path):
    flags = ["--quick", "--algos", "ppo_jax_scan", "--envs", "CartPole-v1", "--no-seed-scaling"]
    code = bench.main([*flags, "--out", str(tmp_path)])
    report = json.loads((tmp_path / "results.json").read_text())
    assert code == 0, (tmp_path / "results.md").read_text()
    (entry,) = report["entries"]
    assert entry["status"] == "pass" and entry["ceiling_sps"] > 0


def test_a_peer_that_is_not_installed_is_skipped(monkeypatch):
    monkeypatch.setitem(bench.PEERS, "sb3", ("no_such_module_here", "sb3_ppo.py", "VIBE_RL_SB3_PYTHON"))
    assert bench.peer_python("sb3") is None
    monkeypatch.setitem(bench.PEERS, "sb3", ("json", "sb3_ppo.py", "VIBE_RL_SB3_PYTHON"))
    monkeypatch.setenv("VIBE_RL_SB3_PYTHON", sys.executable)
    assert bench.peer_python("sb3") == sys.executable


def test_markdown_has_seed_scaling_and_peer_ratios():
    machine = {k: "x" for k in ("command", "date", "device_kind", "backend", "cpu_count", "jax", "jaxlib")}
    report = {
        "machine": machine,
        "entries": [],
        "seed_scaling": [
            {"seeds": 1, "train_s": 2.0, "compile_s": 5.0, "ratio": 1.0},
            {"seeds": 8, "train_s": 6.0, "compile_s": 6.0, "ratio": 3.0},
        ],
        "peers": [
            {"system": "vibe_rl", "status": "ok", "wall_s": 10.0, "train_s": 2.0, "eval_mean": 500.0},
            {
                "system": "sb3",
                "status": "ok",
                "wall_s": 100.0,
                "eval_mean": 250.0,
                "wall_ratio": 10.0,
                "return_ratio": 0.5,
                "train_s": 50.0,
                "train_ratio": 25.0,
            },
            {"system": "rejax", "status": "skipped", "note": "not installed"},
        ],
    }
    table = results.markdown(report)
    assert "| 8 | 6.00 | 6.0 | 3.00 |" in table
    assert "| sb3 | ok | 100.0 | – | 50.00 | 250.0 | 10.00 | 25.00 | 0.50 |" in table
    assert "| rejax | skipped not installed |" in table


def test_rollout_share_times_the_rollout_and_the_whole_iteration():
    # a reduced budget (8 iterations): this checks the script runs and reports, not speed
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark.oneoff.rollout_share",
            "--repeats",
            "1",
            "--set",
            "total_timesteps=4096",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    best = re.search(r"best: rollout ([0-9.]+) s of ([0-9.]+) s \((\d+)%\), 8 iterations", result.stdout)
    assert best, result.stdout
    rollout, whole = float(best.group(1)), float(best.group(2))
    assert 0 < rollout <= whole


@pytest.mark.slow  # 10 s: a Craftax pixel program compiled
def test_the_ceiling_steps_craftax_pixels_and_uses_their_render():
    # Craftax's own env, never reset; an observation nobody reads would be compiled away, and the
    # pixel env timed as fast as the symbolic one (docs/harness.md, Craftax's pixel observations)
    pytest.importorskip("craftax")
    import jax

    ceiling = importlib.import_module("benchmark.ceiling")
    rollout = ceiling.make_random_rollout("craftax/Craftax-Classic-Pixels-v1", num_envs=2, num_steps=3)
    total = float(rollout(jax.random.PRNGKey(0)))
    assert total > 2 * 3 * 63 * 63 * 3 * 0.1  # 6 frames of 63 x 63 x 3 pixels in [0, 1], none all black


def test_event_writing_writes_the_same_points_each_way_and_reports_each(tmp_path):
    """A reduced size (2 x 5 points): this checks what each way writes and that it reports, not speed."""
    events = importlib.import_module("benchmark.oneoff.event_writing")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = [(512 * (i + 1), {"losses/a": float(i), "losses/b": 2.0 * i}) for i in range(5)]
    for name, write in events.WAYS.items():
        (folder := tmp_path / name.split(",")[0]).mkdir()
        write(folder, points)
        accumulator = EventAccumulator(str(folder))
        accumulator.Reload()
        read = [(e.step, e.value) for e in accumulator.Scalars("losses/b")]
        assert read == [(step, values["losses/b"]) for step, values in points], name
    sizes = ["--seeds", "2", "--points", "5", "--rounds", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "benchmark.oneoff.event_writing", *sizes],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(re.findall(r"^  .+ [0-9.]+ s  \([0-9.]+x\)$", result.stdout, re.M)) == len(events.WAYS)


def test_from_results_rebuilds_the_tables_and_plots_of_a_saved_run_without_running(tmp_path):
    """--from-results re-aggregates a saved results.json: no entry runs (there is no script to run
    here), and the tables, the per-script aggregate and the curves come back from the raw scores."""
    curve = ([1000, 2000, 3000], [10.0, 200.0, 480.0])
    machine = {"command": "python -m benchmark --full", "date": "2026-11-25T10:00:00+00:00", "backend": "cpu"}
    machine |= {"device_kind": "cpu", "cpu_count": 2, "jax": "0.10.2", "jaxlib": "0.10.2"}
    entry = {
        "script": "vibe_rl/ppo_jax_scan.py", "env": "CartPole-v1", "variant": "", "name": "ppo_jax_scan",
        "total_timesteps": 3000, "seeds": 2, "threshold": 475.0, "threshold_source": "", "random_score": 22.8,
        "below": False, "status": "pass", "note": "", "seed_eval_means": [500.0, 480.0], "eval_mean": 490.0,
        "eval_std": 10.0, "iqm": 490.0, "iqm_ci95": [480.0, 500.0], "normalised_scores": [1.05, 1.01],
        "normalised_iqm": 1.03, "wall_s": 12.0, "compile_s": 2.0, "env_steps_per_s": 1000.0,
        "curves": [curve, curve], "eval_curves": [curve, curve],
    }  # fmt: skip
    saved = tmp_path / "saved" / "results.json"
    saved.parent.mkdir()
    saved.write_text(json.dumps({"preset": "full", "machine": machine, "entries": [entry]}))
    out = tmp_path / "rebuilt"
    other = tmp_path / "other" / "results.json"  # a second saved run: its entries join, --algos filters
    other.parent.mkdir()
    dqn = entry | {"script": "vibe_rl/dqn_jax.py", "name": "dqn_jax"}
    other.write_text(
        json.dumps({"preset": "full", "machine": machine | {"command": "second"}, "entries": [dqn]})
    )
    assert (
        bench.main(["--from-results", str(saved), str(other), "--algos", "dqn", "--out", str(tmp_path)]) == 0
    )
    assert [r["name"] for r in json.loads((tmp_path / "results.json").read_text())["entries"]] == ["dqn_jax"]
    assert bench.main(["--from-results", str(saved), "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["entries"][0]["seed_eval_means"] == [500.0, 480.0]
    assert report["aggregates"][0]["script"] == "ppo_jax_scan" and report["aggregates"][0]["runs"] == 2
    assert "ppo_jax_scan" in (out / "results.md").read_text()
    assert (out / "curves_CartPole-v1.png").stat().st_size > 1000 and (out / "profile.png").is_file()


def test_a_training_score_entry_scores_the_last_tenth_of_its_training_returns(tmp_path):
    """Craftax's entries score the training episodes (the scoreboard's unit): a seed's mean
    charts/episodic_return over its last tenth of logged points, points without one left out."""
    points = [{"global_step": i, "charts/episodic_return": float(i)} for i in range(1, 21)]
    points.append({"global_step": 21, "charts/SPS": 5.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    assert results.training_score(tmp_path) == pytest.approx(19.5)  # the last 2 of 20
    suite = suite_module.load_suite()
    (quick,) = suite_module.select_entries(suite, quick=True, envs=["craftax/Craftax-Classic-Symbolic-v1"])
    assert quick.score == "training" and quick.total_timesteps == 51_200
    cartpole = suite_module.select_entries(suite, quick=True, envs=["CartPole-v1"])
    assert {entry.score for entry in cartpole} == {"eval"}
