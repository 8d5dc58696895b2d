"""The benchmark's runner: does every script still learn, and how fast is it, on this machine.

    python -m benchmark                          every script on one env, short budget (smoke test; minutes)
    python -m benchmark --quick                  the same, named
    python -m benchmark --full                   the whole suite at full budget (hours on a CPU)
    python -m benchmark --full --algos ppo --envs CartPole-v1 --seeds 2 --out bench
    python -m benchmark --full --entries ppo_jax_scan__CartPole-v1,dqn_jax__Breakout-MinAtar
    python -m benchmark --quick --peers          + rejax and Stable-Baselines3, when installed
    python -m benchmark --full --record          + keep each entry's seeds and curves in docs/results/,
                                                 and regenerate docs/results.md, the page to cite
    python -m benchmark --results-doc [--check]  docs/results.md from docs/results/ alone
    python -m benchmark --from-results OUT/results.json --record   the same from a saved run
    python -m benchmark --quick --eval-points 0  no evaluation curves (for throughput figures)

The suite (scripts, envs, flags, budgets, thresholds) is benchmark/suite.toml, read by
benchmark/suite.py. Each entry is run as one subprocess, exactly as a user runs the script
(`--num-seeds N`: N seeds in one vmapped program, `--eval-frequency total_timesteps //
eval_points`: an evaluation curve), and read back from its run directories (eval.json,
metrics.jsonl, args.json) by benchmark/results.py, which also makes every figure, table and plot
(its docstring defines them); nothing is imported from the scripts. Writes to --out:

    results.json     every figure, with the machine, jax/jaxlib versions, device and date;
                     per entry each seed's final score and evaluation curve
    results.md       the tables: IQM [95% CI] vs threshold, wall/compile time, env steps/s;
                     per script, the IQM of its normalised scores over its envs
    curves_{env}.png learning curves, every script: mean and 95% bootstrap band over seeds of
                     the training return (solid) and of the evaluation return (dashed)
    profile.png      performance profiles: per script, the fraction of runs whose normalised
                     score exceeds tau
    logs/, runs/     each child's output and the scripts' run directories

--docs writes the table into docs/benchmarks.md. --record writes each full-preset entry that ran
to docs/results/ (its command, commit, machine, every seed's score and curves) and regenerates
docs/results.md from that folder. --from-results PATH runs nothing: it re-aggregates a saved
results.json (every seed's raw scores and curves are in it) and writes the same outputs.
`python -m benchmark.compare RUN_DIR` sets a run of yours beside an entry's seeds.

Ctrl-C (SIGINT) or SIGTERM stops the runner: the child in flight is killed with its process
group (each child runs in its own), no other starts, and the report of the entries that
finished is written, with the command that runs the rest (`--entries`); exit status 128 +
the signal's number. SIGHUP (its terminal closed) does the same, unless it is ignored (nohup).
Otherwise exit status 1 if any entry crashed, timed out, was missing or missed its threshold.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.results import (
    RESULTS_DIR,
    algorithm_fingerprint,
    ci_text,
    entry_result,
    fmt,
    markdown,
    median_sps,
    read_evals,
    threshold_text,
    update_docs,
    write_records,
    write_report,
    write_results_doc,
)
from benchmark.suite import ROOT, SUITE, Entry, entry_flags, flag_list, load_suite, select_entries, selected

PEERS_DIR = Path(__file__).with_name("peers")
COMPILED = re.compile(r"^compiled .* in ([0-9.]+)s", re.MULTILINE)
TRAINED = re.compile(r"^trained .* in ([0-9.]+)s", re.MULTILINE)  # the peer runners print it


# =====================================================================================
# Children, and stopping them: Ctrl-C and SIGTERM
# =====================================================================================


@dataclass
class Stop:
    """Whether a signal asked the runner to stop, and the child it is waiting on."""

    signum: int | None = None  # the first SIGINT or SIGTERM received
    child: subprocess.Popen | None = None  # the child in flight, in its own process group


STOP = Stop()


def kill_group(process: subprocess.Popen) -> None:
    """Kill a child and everything it started: the child leads its own process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def on_stop_signal(signum: int, _frame: Any) -> None:
    """A stop signal: kill the child in flight; the runner starts no other and writes its report."""
    STOP.signum = STOP.signum or signum  # no print here: it could re-enter a print in flight
    if STOP.child is not None:
        kill_group(STOP.child)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within it, SIGINT, SIGTERM and SIGHUP stop the runner (on_stop_signal); the handlers are
    restored after."""
    STOP.signum, STOP.child = None, None
    stops = [signal.SIGINT, signal.SIGTERM]
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup's kept
        stops.append(signal.SIGHUP)  # a closed terminal: the child is in no terminal's process group
    previous = {s: signal.signal(s, on_stop_signal) for s in stops}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        STOP.signum = None  # the report keeps which signal stopped the run


@contextlib.contextmanager
def child(command: list[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """A child process in its own process group, so that a stop or an error kills it and all it
    started; it is always waited for, so none outlives the runner."""
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, **popen)
    STOP.child = process
    try:
        if STOP.signum is not None:  # the signal came before the child was registered
            kill_group(process)
        yield process
    finally:
        STOP.child = None
        if process.poll() is None:
            kill_group(process)
        process.wait()


def child_output(command: list[str]) -> tuple[int, str]:
    """A short child's exit status and stdout (its stderr dropped)."""
    with child(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as process:
        stdout, _ = process.communicate()
    return process.returncode, stdout


# =====================================================================================
# Running one script as a user does
# =====================================================================================


@dataclass
class RunOutcome:
    """What one subprocess did: its status and the run directories it wrote."""

    status: str  # "ok", "crash", "timeout", "missing", "stopped" (a signal stopped the runner)
    wall_s: float
    compile_s: float | None
    run_dirs: list[Path]
    note: str = ""


def launch(
    script: Path, flags: list[str], output_dir: Path, timeout: float, log: Path, python: str = sys.executable
) -> RunOutcome:
    """Run `python script flags --output-dir output_dir`; stdout+stderr go to `log`."""
    if not script.is_file():
        return RunOutcome("missing", 0.0, None, [], f"{script} does not exist")
    shutil.rmtree(output_dir, ignore_errors=True)  # only this run's directories are read back
    output_dir.mkdir(parents=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [python, str(script), *flags, "--output-dir", str(output_dir)]
    env = {**os.environ, "WANDB_MODE": "offline", "MPLBACKEND": "Agg"}
    start = time.perf_counter()
    with open(log, "w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        with child(command, stdout=out, stderr=subprocess.STDOUT, env=env) as process:
            try:
                returncode = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                returncode = None  # leaving `child` kills it, with all it started
    wall = time.perf_counter() - start
    text = log.read_text()
    compile_times = [float(x) for x in COMPILED.findall(text)]
    compile_s = sum(compile_times) if compile_times else None
    run_dirs = sorted(p for p in output_dir.iterdir() if p.is_dir())
    if STOP.signum is not None:
        return RunOutcome(
            "stopped", wall, compile_s, run_dirs, f"stopped by {signal.Signals(STOP.signum).name}"
        )
    if returncode is None:
        return RunOutcome("timeout", wall, compile_s, run_dirs, f"killed after {timeout:.0f}s")
    if returncode != 0:
        last = text.strip().splitlines()[-1:] or [""]
        return RunOutcome("crash", wall, compile_s, run_dirs, f"exit {returncode}: {last[0][:200]}")
    missing = [d.name for d in run_dirs if not (d / "eval.json").is_file()]
    if not run_dirs or missing:
        return RunOutcome("crash", wall, compile_s, run_dirs, "no run directory with eval.json")
    return RunOutcome("ok", wall, compile_s, run_dirs)


def installed_entries(entries: list[Entry]) -> list[Entry]:
    """The entries whose env can run here: a playground/ env needs the optional `playground` extra
    (mujoco_playground); each entry left out is said in one line."""
    if importlib.util.find_spec("mujoco_playground") is not None:
        return entries
    for entry in entries:
        if entry.env.startswith("playground/"):
            print(f"skipped {entry.name} on {entry.env}: pip install -e '.[playground]' to run it")
    return [entry for entry in entries if not entry.env.startswith("playground/")]


def run_entry(entry: Entry, out: Path) -> dict[str, Any]:
    """Run one entry, read it back, and judge it against its threshold."""
    script = ROOT / entry.script
    fingerprint = algorithm_fingerprint(script) if script.is_file() else None
    log = out / "logs" / f"{entry.tag}.log"
    outcome = launch(script, entry_flags(entry), out / "runs" / entry.tag, entry.timeout, log)
    result = entry_result(
        entry, outcome.status, outcome.note, outcome.run_dirs, outcome.wall_s, outcome.compile_s, fingerprint
    )
    iqm_ci = ci_text(result["iqm"], result["iqm_ci95"])
    said = f"{result['status']} IQM {iqm_ci} (threshold {threshold_text(result)})"
    if result["status"] == "stopped":
        said = "not finished:"
    print(f"  {entry.name} {entry.env}: {said} {result['note']}")
    return result


# =====================================================================================
# Machine, ceilings, seed scaling, peers
# =====================================================================================

DEVICE_PROBE = (
    "import json, jax, jaxlib; d = jax.devices(); print(json.dumps({'jax': jax.__version__, "
    "'jaxlib': jaxlib.__version__, 'backend': jax.default_backend(), 'device_kind': d[0].device_kind, "
    "'device_count': len(d)}))"
)


def machine_info() -> dict[str, Any]:
    """This machine and its jax, asked in a subprocess (the harness itself holds no device)."""
    returncode, stdout = child_output([sys.executable, "-c", DEVICE_PROBE])
    info = json.loads(stdout) if returncode == 0 else {"jax": None, "device_kind": None}
    return {
        **info,
        "commit": commit(),
        "cpu_model": cpu_model(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmark", *sys.argv[1:]]),
    }


def commit() -> str | None:
    """The repository's HEAD, "+changes" when the scripts or the suite differ from it; None outside git."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    if head.returncode != 0:
        return None
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "vibe_rl", "benchmark/suite.toml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), else None."""
    cpuinfo = Path("/proc/cpuinfo")
    found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M) if cpuinfo.is_file() else None
    return found.group(1).strip() if found else None


def ceiling(env_id: str, num_envs: int) -> float | None:
    """benchmark/ceiling.py's random-action env steps/s, in a subprocess (none for Craftax and Playground:
    their ceiling is `--resets`'s, minutes on a CPU: docs/harness.md, "Resets: what they cost")."""
    if env_id.startswith(("craftax/", "playground/")):
        return None
    command = [sys.executable, "-m", "benchmark.ceiling", "--env-id", env_id, "--num-envs", str(num_envs)]
    if env_id.startswith("brax/"):  # a physics step costs ~100x a CartPole step: one episode's length
        command += ["--num-steps", "1000"]
    returncode, stdout = child_output(command)
    found = re.search(r"([0-9,]+) env steps/s", stdout)
    return float(found.group(1).replace(",", "")) if returncode == 0 and found else None


def budget(spec: dict[str, Any], quick: bool) -> int:
    return spec["quick_total_timesteps"] if quick else spec["total_timesteps"]


def seed_scaling(spec: dict[str, Any], quick: bool, out: Path) -> list[dict[str, Any]]:
    """Training time of 1, 8, 64 seeds vmapped in one program, and its ratio to 1 seed."""
    steps = budget(spec, quick)
    rows = []
    for seeds in spec["seeds"]:
        if STOP.signum is not None:
            break
        flags = ["--env-id", spec["env"], "--total-timesteps", str(steps), "--num-seeds", str(seeds)]
        flags += flag_list(spec.get("flags", {}))
        tag = f"seeds{seeds}"
        log = out / "logs" / f"seed_scaling__{tag}.log"
        outcome = launch(ROOT / spec["script"], flags, out / "seed_scaling" / tag, 3600, log)
        sps = median_sps(outcome.run_dirs[0]) if outcome.status == "ok" else None
        train_s = steps / sps if sps else None
        rows.append(
            {"seeds": seeds, "status": outcome.status, "train_s": train_s, "compile_s": outcome.compile_s}
        )
        shutil.rmtree(out / "seed_scaling" / tag, ignore_errors=True)  # 64 run directories
        print(f"  seed scaling {seeds}: train {fmt(train_s)}s compile {fmt(outcome.compile_s)}s")
    base = rows[0]["train_s"] if rows else None
    for row in rows:
        row["ratio"] = row["train_s"] / base if base and row["train_s"] else None
    return rows


PEERS = {
    "sb3": ("stable_baselines3", "sb3_ppo.py", "VIBE_RL_SB3_PYTHON"),
    "rejax": ("rejax", "rejax_ppo.py", "VIBE_RL_REJAX_PYTHON"),
}


def peer_python(peer: str) -> str | None:
    """The interpreter that has the peer installed: $VIBE_RL_{PEER}_PYTHON or this one."""
    module, _, variable = PEERS[peer]
    python = os.environ.get(variable, sys.executable)
    returncode, _ = child_output([python, "-c", f"import {module}"])
    return python if returncode == 0 else None


def run_peers(spec: dict[str, Any], quick: bool, out: Path) -> list[dict[str, Any]]:
    """ppo_jax_scan and each installed peer on the same env, budget and hyperparameters."""
    flags = {
        "env-id": spec["env"],
        "total-timesteps": budget(spec, quick),
        "seed": 1,
        **spec.get("flags", {}),
    }
    rows = []
    log = out / "logs" / "peer_ours.log"
    ours = launch(ROOT / spec["script"], flag_list(flags), out / "peers" / "ours", 3600, log)
    rows.append(peer_row("vibe_rl " + Path(spec["script"]).stem, ours, log, flags["total-timesteps"]))
    for peer, (module, runner, variable) in PEERS.items():
        if STOP.signum is not None:
            break
        python = peer_python(peer)
        if python is None:
            note = f"not installed ({module}; set {variable} to an interpreter that has it)"
            rows.append({"system": peer, "status": "skipped", "note": note})
            print(f"  peer {peer}: skipped, {note}")
            continue
        peer_out = out / "peers" / peer
        log = out / "logs" / f"peer_{peer}.log"
        outcome = launch(PEERS_DIR / runner, flag_list(flags), peer_out, 3600, log, python)
        rows.append(peer_row(peer, outcome, log, flags["total-timesteps"]))
    base = rows[0]
    for row in rows:
        for key in ("wall_s", "train_s"):
            if row.get(key) and base.get(key):
                row[key.replace("_s", "_ratio")] = row[key] / base[key]
        if row.get("eval_mean") is not None and base.get("eval_mean"):
            row["return_ratio"] = row["eval_mean"] / base["eval_mean"]
    return rows


def peer_row(system: str, outcome: RunOutcome, log: Path, steps: int) -> dict[str, Any]:
    """A peer's figures; train s is its "trained ... in Xs" line or, for ours, steps / charts/SPS."""
    evals = read_evals(outcome.run_dirs)
    trained = TRAINED.findall(log.read_text()) if log.is_file() else []
    sps = median_sps(outcome.run_dirs[0]) if outcome.run_dirs else None
    row = {
        "system": system,
        "status": outcome.status,
        "note": outcome.note,
        "wall_s": outcome.wall_s,
        "compile_s": outcome.compile_s,
        "train_s": float(trained[-1]) if trained else (steps / sps if sps else None),
        "eval_mean": evals[0]["mean"] if evals else None,
    }
    print(f"  peer {system}: {outcome.status} wall {outcome.wall_s:.1f}s return {fmt(row['eval_mean'])}")
    return row


# =====================================================================================
# main
# =====================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmark", description=__doc__.splitlines()[0])
    preset = parser.add_mutually_exclusive_group()
    quick = "entries with a quick budget, minutes (a smoke test; the default)"
    preset.add_argument("--quick", action="store_true", help=quick)
    preset.add_argument("--full", action="store_true", help="the whole suite at full budget (hours on a CPU)")
    parser.add_argument(
        "--algos", help="comma-separated scripts, e.g. ppo_jax_scan,dqn (a prefix selects all)"
    )
    parser.add_argument("--envs", help="comma-separated env ids, e.g. CartPole-v1,Pendulum-v1")
    parser.add_argument(
        "--entries",
        help="comma-separated entries by tag, e.g. ppo_jax_scan__CartPole-v1,ppo_rnn_jax__CartPole-v1__masked"
        " (a stopped run prints the command that runs the rest so)",
    )
    parser.add_argument("--seeds", type=int, help="seeds per entry (overrides the suite)")
    parser.add_argument("--timeout", type=float, help="seconds per entry (overrides the suite)")
    parser.add_argument(
        "--eval-points", type=int, help="evaluations per run (overrides the suite; 0: none, for pure speed)"
    )
    parser.add_argument("--out", type=Path, help="output directory (default benchmark/out/{preset}-{time})")
    parser.add_argument("--suite", type=Path, default=SUITE, help="the suite file")
    parser.add_argument("--peers", action="store_true", help="also run rejax and SB3 PPO, when installed")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the random-action speed ceilings")
    parser.add_argument("--no-seed-scaling", action="store_true", help="skip the 1/8/64-seed timing")
    parser.add_argument(
        "--docs", action="store_true", help="write the table and plots into docs/benchmarks.md"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="keep each full-preset entry that ran in docs/results/ (its seeds' scores and curves) and "
        "regenerate docs/results.md",
    )
    parser.add_argument(
        "--results-doc",
        action="store_true",
        help="write docs/results.md and its curve images from docs/results/ alone; runs nothing",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --results-doc: write nothing; exit 1 if the page and the data differ",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="the data of --record and --results-doc; the page is written beside it (default docs/results)",
    )
    parser.add_argument(
        "--from-results",
        type=Path,
        nargs="+",
        help="run nothing: re-aggregate saved results.json files (their entries, filtered by --algos and "
        "--envs, in one report) and write the tables, plots and docs",
    )
    parser.add_argument(
        "--note", action="append", default=[], help="a note on the run, kept in its results.json (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.check and not args.results_doc:
        parser.error("--check checks docs/results.md: use it with --results-doc")
    if args.results_doc and (args.quick or args.full or args.from_results or args.record):
        parser.error(
            "--results-doc writes the page from docs/results/ alone; to add a run's entries, use --record"
        )
    if args.record and args.quick:
        parser.error("--record keeps full-preset runs only (a row is an entry at its full budget)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    split = lambda s: s.split(",") if s else None
    if args.results_doc:
        return write_results_doc(args.results_dir, check=args.check, suite=args.suite)
    if args.from_results:  # the first saved run's report (its machine, command and date) and every entry
        reports = [json.loads(path.read_text()) for path in args.from_results]
        algos, envs = split(args.algos), split(args.envs)
        report = {**reports[0], "notes": [n for r in reports for n in r.get("notes", [])] + args.note}
        report["entries"] = [r for saved in reports for r in saved["entries"] if selected(r, algos, envs)]
        for saved in reports[1:]:  # say where the other entries come from
            report["notes"].append(
                f"Entries also from `{saved['machine']['command']}`, {saved['machine']['date']}."
            )
        out = args.out or args.from_results[0].parent
        out.mkdir(parents=True, exist_ok=True)
        return write_outputs(report, out, args)
    quick = not args.full  # without a preset: the quick one, minutes (the full suite takes hours on a CPU)
    preset = "quick" if quick else "full"
    suite = load_suite(args.suite)
    tags = split(args.entries)
    unknown = sorted(set(tags or []) - {e.tag for e in select_entries(suite, quick)})
    if unknown:
        print(
            f"python -m benchmark: error: no {preset}-preset entry is tagged {', '.join(unknown)}",
            file=sys.stderr,
        )
        return 2
    entries = select_entries(
        suite, quick, split(args.algos), split(args.envs), args.seeds, args.timeout, args.eval_points, tags
    )
    entries = installed_entries(entries)
    out = args.out or ROOT / "benchmark" / "out" / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    with stop_on_signals():
        report = run_suite(suite, entries, quick, out, args)
    return write_outputs(report, out, args)


def run_suite(
    suite: dict[str, Any], entries: list[Entry], quick: bool, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Run the entries, then the ceilings, seed scaling and peers asked for, into one report. A
    signal (stop_on_signals) ends it early: the entries that finished are kept, and
    report["stopped"] says which signal and the command that runs the rest."""
    preset = "quick" if quick else "full"
    report: dict[str, Any] = {"preset": preset, "machine": machine_info(), "entries": [], "notes": args.note}
    print(f"benchmark ({preset}): {len(entries)} entries -> {out}")
    for entry in entries:
        if STOP.signum is not None:
            break
        result = run_entry(entry, out)
        if result["status"] != "stopped":  # an entry the signal cut short is in the rest
            report["entries"].append(result)
    if not args.no_ceiling:
        cache: dict[tuple[str, int], float | None] = {}
        for r in report["entries"]:
            if STOP.signum is not None:
                break
            if r["num_envs"] and r["env_steps_per_s"]:
                key = (r["env"], r["num_envs"] * r["seeds"])
                if key not in cache:
                    cache[key] = ceiling(*key)
                r["ceiling_sps"] = cache[key]
    if not args.no_seed_scaling and "seed_scaling" in suite and STOP.signum is None:
        report["seed_scaling"] = seed_scaling(suite["seed_scaling"], quick, out)
    if args.peers and "peers" in suite and STOP.signum is None:
        report["peers"] = run_peers(suite["peers"], quick, out)
    if STOP.signum is not None:
        done = {r["tag"] for r in report["entries"]}
        rest = [entry for entry in entries if entry.tag not in done]
        name = signal.Signals(STOP.signum).name
        report["stopped"] = {
            "signal": name,
            "rest": [e.tag for e in rest],
            "command": rest_command(args, rest),
        }
        print(f"\nstopped by {name}: {len(report['entries'])} of {len(entries)} entries finished")
    return report


def rest_command(args: argparse.Namespace, rest: list[Entry]) -> str | None:
    """The command that runs `rest` with this run's settings (None when no entry is left)."""
    if not rest:
        return None
    words = ["python", "-m", "benchmark", "--full" if args.full else "--quick"]
    words += ["--entries", ",".join(entry.tag for entry in rest)]
    for flag, value in (
        ("--seeds", args.seeds),
        ("--timeout", args.timeout),
        ("--eval-points", args.eval_points),
    ):
        if value is not None:
            words += [flag, str(value)]
    if args.suite.resolve() != SUITE:
        words += ["--suite", str(args.suite)]
    switches = {
        "--peers": args.peers,
        "--no-ceiling": args.no_ceiling,
        "--no-seed-scaling": args.no_seed_scaling,
    }
    switches |= {"--docs": args.docs, "--record": args.record}
    words += [flag for flag, on in switches.items() if on]
    return shlex.join(words)


def write_outputs(report: dict[str, Any], out: Path, args: argparse.Namespace) -> int:
    """The report's files and the docs asked for; 128 + the signal's number if a signal stopped
    the run, else 1 if any entry failed."""
    table, plots = write_report(report, out)
    stopped = report.get("stopped")
    if args.docs and stopped:
        print("docs/benchmarks.md left as it was: a stopped run's table is not the preset's")
    elif args.docs:
        update_docs(report, markdown({**report, "aggregates": None}), plots)  # per script: docs/results.md
    if args.record and report["preset"] != "full":
        print(f"not recorded: a {report['preset']}-preset run (a row is an entry at its full budget)")
    elif args.record:
        write_records(report, args.results_dir)
        write_results_doc(args.results_dir, suite=args.suite)
    print(table)
    if stopped:
        return 128 + signal.Signals[stopped["signal"]].value
    failed = [f"{r['name']} {r['env']}: {r['status']}" for r in report["entries"] if r["status"] != "pass"]
    print("FAILED: " + "; ".join(failed) if failed else "all checks passed")
    return 1 if failed or not report["entries"] else 0


if __name__ == "__main__":
    sys.exit(main())
