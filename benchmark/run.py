"""The benchmark harness: does every script still learn, and how fast is it, on this machine.

    python -m benchmark                          every script on one env, short budget (smoke test; minutes)
    python -m benchmark --quick                  the same, named
    python -m benchmark --full                   the whole suite at full budget (hours on a CPU)
    python -m benchmark --full --algos ppo --envs CartPole-v1 --seeds 2 --out bench
    python -m benchmark --quick --peers          + rejax and Stable-Baselines3, when installed
    python -m benchmark --full --record          + keep each entry's seeds and curves in docs/results/,
                                                 and regenerate docs/results.md, the page to cite
    python -m benchmark --results-doc [--check]  docs/results.md from docs/results/ alone
    python -m benchmark --from-results OUT/results.json --record   the same from a saved run
    python -m benchmark --quick --eval-points 0  no evaluation curves (for throughput figures)

The suite (scripts, envs, flags, budgets, thresholds) is benchmark/suite.toml. Each entry
is run as one subprocess, exactly as a user runs the script (`--num-seeds N`: N seeds in
one vmapped program, `--eval-frequency total_timesteps // eval_points`: an evaluation curve),
and read back from its run directories (eval.json, metrics.jsonl, args.json); nothing is
imported from the scripts. Writes to --out:

    results.json     every figure, with the machine, jax/jaxlib versions, device and date;
                     per entry each seed's final score and evaluation curve
    results.md       the tables: IQM [95% CI] vs threshold, wall/compile time, env steps/s;
                     per script, the IQM of its normalised scores over its envs
    curves_{env}.png learning curves, every script: mean and 95% bootstrap band over seeds of
                     the training return (solid) and of the evaluation return (dashed)
    profile.png      performance profiles: per script, the fraction of runs whose normalised
                     score exceeds tau
    runs/            the scripts' run directories

--docs writes the table into docs/benchmarks.md. --record writes each full-preset entry that ran
to docs/results/ (benchmark/results.py: its command, commit, machine, every seed's score and
curves) and regenerates docs/results.md from that folder. --from-results PATH runs nothing: it
re-aggregates a saved results.json (every seed's raw scores and curves are in it) and writes the
same outputs. `python -m benchmark.compare RUN_DIR` sets a run of yours beside an entry's seeds.
`python -m benchmark.export RUN_DIRS` writes the runs' training curves as a CSV;
`python -m benchmark.random_policy ENV_IDS` measures suite.toml's [random].

Exit status 1 if any entry crashed, timed out, was missing or missed its threshold.

Definitions:
- score: a seed's eval.json "mean", its final deterministic evaluation (the mean return of
  --eval-episodes episodes); with `score = "training"` (Craftax: its scoreboard's unit, and
  greedy policies there score below random), the mean training return (charts/episodic_return)
  of its last tenth of logged points. eval return: the mean over seeds of the scores, +- their std.
- IQM [95% CI]: the interquartile mean of the seeds' scores (trim_mean(x, 0.25): with 3 seeds
  or fewer, the mean) and its 95% percentile bootstrap interval over the seeds (2000
  resamples, benchmark/stats.py). An entry passes when its IQM reaches its threshold; an entry
  with `below = true` (a contrast: a script that must fail where another succeeds, e.g. a
  feed-forward policy on a task that needs memory) passes when its IQM stays below it, and has
  no normalised score (it is left out of the per-script aggregates and profiles).
- normalised: (score - random) / (threshold - random): the random policy's return (suite.toml's
  [random]) is 0 and the entry's threshold, the reference, is 1 (the quick preset's own
  threshold in --quick). Per script: the IQM of the normalised scores of all its runs, every
  env's seeds pooled, with a stratified bootstrap CI (seeds resampled within each env), as in
  Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice".
- compile s: the sum of the "compiled ... in X.Xs" lines the script prints.
- env steps/s: training throughput summed over seeds = seeds x the median of the run's
  logged charts/SPS (each chunk's steps / its time: compile, start-up and the final
  evaluation excluded); where a script logs no charts/SPS, total steps x seeds / (wall -
  compile). The evaluations at --eval-frequency run while the next chunk is in flight and
  share its device: they lower charts/SPS (quick PPO CartPole-v1, 2026-11-25: ~100k instead
  of ~150k-190k steps/s); `--eval-points 0` measures speed without them.
- ceiling: random-action gymnax stepping in one compiled scan (benchmark/ceiling.py) at
  num_envs x seeds parallel envs, the same number the vmapped program steps.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

import numpy as np

from benchmark.stats import iqm, mean_ci_band, normalise, performance_profile, stratified_bootstrap_ci

ROOT = Path(__file__).resolve().parents[1]
SUITE = Path(__file__).with_name("suite.toml")
PEERS_DIR = Path(__file__).with_name("peers")
COMPILED = re.compile(r"^compiled .* in ([0-9.]+)s", re.MULTILINE)
TRAINED = re.compile(r"^trained .* in ([0-9.]+)s", re.MULTILINE)  # the peer runners print it
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
RESULTS_DOC_PATH = ROOT / "docs" / "results.md"


# =====================================================================================
# The suite
# =====================================================================================


@dataclass
class Entry:
    """One (script, env) of the suite at one preset's budget."""

    script: str  # path relative to the repository root (or absolute)
    env: str
    total_timesteps: int
    threshold: float
    seeds: int
    timeout: float
    flags: dict[str, Any] = field(default_factory=dict)
    variant: str = ""  # tells apart two entries of one script and env (e.g. "masked")
    below: bool = False  # a contrast: the IQM must stay below the threshold
    eval_points: int = 20  # evaluations per run: --eval-frequency total_timesteps // eval_points (0: off)
    random_score: float | None = None  # the random policy's return on env (suite.toml's [random])
    threshold_source: str = ""  # where the threshold comes from: the comment on its line in suite.toml
    score: str = "eval"  # a seed's score: "eval", its final evaluation; "training", its last training returns

    @property
    def name(self) -> str:
        return Path(self.script).stem + (f" ({self.variant})" if self.variant else "")

    @property
    def eval_frequency(self) -> int:
        return max(1, self.total_timesteps // self.eval_points) if self.eval_points else 0


def load_suite(path: Path = SUITE) -> dict[str, Any]:
    """The suite; each [[entry]] gains `threshold_source`, the comment on its threshold line."""
    text = path.read_text()
    suite = tomllib.loads(text)
    blocks = re.split(r"^\[\[entry\]\]\s*$", text, flags=re.MULTILINE)[1:]  # the text of each [[entry]]
    for raw, block in zip(suite.get("entry", []), blocks, strict=True):
        found = re.search(r"^threshold\s*=[^#\n]*#\s*(.*)$", block, flags=re.MULTILINE)
        raw.setdefault("threshold_source", found.group(1).strip() if found else "")
    return suite


def selected(entry: dict[str, Any], algos: list[str] | None, envs: list[str] | None) -> bool:
    """Whether a suite entry (or a saved result: both have "script" and "env") is in --algos / --envs.
    An algo matches a script's stem or its prefix up to "_" ("ppo" selects ppo_jax_scan and ppo_multigpu)."""
    stem = Path(entry["script"]).stem
    return (not algos or any(stem == a or stem.startswith(a + "_") for a in algos)) and (
        not envs or entry["env"] in envs
    )


def select_entries(
    suite: dict[str, Any],
    quick: bool,
    algos: list[str] | None = None,
    envs: list[str] | None = None,
    seeds: int | None = None,
    timeout: float | None = None,
    eval_points: int | None = None,
) -> list[Entry]:
    """The suite's entries for a preset, filtered by script name and env.

    --quick keeps the entries with a `quick` table and applies its budget, threshold, flags
    (and seeds, timeout, eval_points) over the full ones; [defaults] gives seeds, timeout and
    eval_points otherwise; seeds, timeout and eval_points given here override all. An entry's
    own `seeds` is the full preset's (what a seed costs at the full budget): --quick takes its
    table's, else quick_seeds. A quick threshold's source is "quick smoke threshold".
    `selected` says which entries --algos / --envs keep.
    """
    defaults = suite.get("defaults", {})
    entries = []
    for raw in suite["entry"]:
        if quick and "quick" not in raw:
            continue
        if not selected(raw, algos, envs):
            continue
        over = raw.get("quick", {}) if quick else {}
        prefix = "quick_" if quick else ""
        source = "quick smoke threshold, not a reference" if "threshold" in over else ""
        points = over.get("eval_points", raw.get("eval_points", defaults.get("eval_points", 20)))
        own_seeds = defaults.get("quick_seeds", 1) if quick else raw.get("seeds", defaults.get("seeds", 1))
        entries.append(
            Entry(
                script=raw["script"],
                env=raw["env"],
                total_timesteps=over.get("total_timesteps", raw["total_timesteps"]),
                threshold=over.get("threshold", raw["threshold"]),
                seeds=seeds or over.get("seeds", own_seeds),
                timeout=timeout
                or over.get("timeout", raw.get("timeout", defaults.get(prefix + "timeout", 3600))),
                flags={**raw.get("flags", {}), **over.get("flags", {})},
                variant=raw.get("variant", ""),
                below=raw.get("below", False),
                eval_points=points if eval_points is None else eval_points,
                random_score=suite.get("random", {}).get(raw["env"]),
                threshold_source=source or raw.get("threshold_source", ""),
                score=raw.get("score", "eval"),
            )
        )
    return entries


def installed_entries(entries: list[Entry]) -> list[Entry]:
    """The entries whose env can run here: a playground/ env needs the optional `playground` extra
    (mujoco_playground); each entry left out is said in one line."""
    if importlib.util.find_spec("mujoco_playground") is not None:
        return entries
    for entry in entries:
        if entry.env.startswith("playground/"):
            print(f"skipped {entry.name} on {entry.env}: pip install -e '.[playground]' to run it")
    return [entry for entry in entries if not entry.env.startswith("playground/")]


def flag_list(flags: dict[str, Any]) -> list[str]:
    """A toml flag table as tyro command-line flags."""
    out = []
    for key, value in flags.items():
        if value is True:
            out.append(f"--{key}")
        elif value is False:
            out.append(f"--no-{key}")
        else:
            out += [f"--{key}", str(value)]
    return out


# =====================================================================================
# Running one script as a user does, and reading its run directories back
# =====================================================================================


@dataclass
class RunOutcome:
    """What one subprocess did: its status and the run directories it wrote."""

    status: str  # "ok", "crash", "timeout", "missing"
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
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            returncode = None
    wall = time.perf_counter() - start
    text = log.read_text()
    compile_times = [float(x) for x in COMPILED.findall(text)]
    compile_s = sum(compile_times) if compile_times else None
    run_dirs = sorted(p for p in output_dir.iterdir() if p.is_dir())
    if returncode is None:
        return RunOutcome("timeout", wall, compile_s, run_dirs, f"killed after {timeout:.0f}s")
    if returncode != 0:
        last = text.strip().splitlines()[-1:] or [""]
        return RunOutcome("crash", wall, compile_s, run_dirs, f"exit {returncode}: {last[0][:200]}")
    missing = [d.name for d in run_dirs if not (d / "eval.json").is_file()]
    if not run_dirs or missing:
        return RunOutcome("crash", wall, compile_s, run_dirs, "no run directory with eval.json")
    return RunOutcome("ok", wall, compile_s, run_dirs)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def learning_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """(global_step, charts/episodic_return) of a run, the finite points only."""
    points = [p for p in read_jsonl(run_dir / "metrics.jsonl") if "charts/episodic_return" in p]
    points = [p for p in points if p["charts/episodic_return"] is not None]
    points = [p for p in points if math.isfinite(p["charts/episodic_return"])]
    return [p["global_step"] for p in points], [p["charts/episodic_return"] for p in points]


def eval_curve(evaluation: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(global_step, mean return) of eval.json's evaluation curve (--eval-frequency's points, then
    the final evaluation); just the final evaluation where the run wrote no curve."""
    points = evaluation.get("eval_curve") or [evaluation]
    points = [p for p in points if "global_step" in p]
    return [p["global_step"] for p in points], [p["mean"] for p in points]


def training_score(run_dir: Path) -> float:
    """The mean training return (charts/episodic_return) of a run's last tenth of logged points."""
    returns = [p["charts/episodic_return"] for p in map(json.loads, (run_dir / "metrics.jsonl").open())
               if "charts/episodic_return" in p]  # fmt: skip
    return float(np.mean(returns[-max(1, len(returns) // 10) :]))


def read_evals(run_dirs: list[Path]) -> list[dict[str, Any]]:
    return [json.loads((d / "eval.json").read_text()) for d in run_dirs if (d / "eval.json").is_file()]


def median_sps(run_dir: Path) -> float | None:
    values = [p["charts/SPS"] for p in read_jsonl(run_dir / "metrics.jsonl") if "charts/SPS" in p]
    return float(np.median(values)) if values else None


def read_args(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "args.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def num_envs_of(run_dir: Path) -> int | None:
    return read_args(run_dir).get("num_envs")


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), float(np.std(values))


# =====================================================================================
# Suite entries
# =====================================================================================


def entry_tag(script: str, env: str, variant: str = "") -> str:
    """An entry's name in paths: ppo_jax_scan__CartPole-v1, ppo_rnn_jax__CartPole-v1__masked."""
    return f"{Path(script).stem}__{env.replace('/', '-')}" + (f"__{variant}" if variant else "")


def passes(score: float, threshold: float, below: bool) -> bool:
    """Whether an IQM passes: it reaches the threshold, or for a contrast (`below`) stays under it."""
    return score < threshold if below else score >= threshold


def entry_flags(entry: Entry) -> list[str]:
    """The flags an entry runs its script with (`launch` adds --output-dir); benchmark/commands.py
    writes them, less the harness's own, as the commands of docs/commands.md."""
    return [
        "--env-id",
        entry.env,
        "--total-timesteps",
        str(entry.total_timesteps),
        "--seed",
        "1",
        "--num-seeds",
        str(entry.seeds),
        "--exp-name",
        Path(entry.script).stem,
        "--eval-frequency",
        str(entry.eval_frequency),
        *flag_list(entry.flags),
    ]


def run_entry(entry: Entry, out: Path) -> dict[str, Any]:
    """Run one entry, read it back, and judge it against its threshold."""
    tag = entry_tag(entry.script, entry.env, entry.variant)
    from benchmark.results import algorithm_fingerprint  # benchmark/results.py imports this module

    flags = entry_flags(entry)
    fingerprint = algorithm_fingerprint(ROOT / entry.script) if (ROOT / entry.script).is_file() else None
    outcome = launch(
        ROOT / entry.script, flags, out / "runs" / tag, entry.timeout, out / "logs" / f"{tag}.log"
    )
    scored = [d for d in outcome.run_dirs if (d / "eval.json").is_file()]  # a seed's directory, finished
    evals = read_evals(scored)
    seed_means = [e["mean"] for e in evals]
    if entry.score == "training":
        seed_means = [training_score(d) for d in scored]
    mean, std = mean_std(seed_means)
    score = iqm(seed_means) if seed_means else None
    status, note = outcome.status, outcome.note
    if status == "ok" and len(seed_means) != entry.seeds:
        status, note = "crash", f"{len(seed_means)} run directories for {entry.seeds} seeds"
    if status == "ok":
        status = "pass" if passes(score, entry.threshold, entry.below) else "fail"
    normalised = None
    if seed_means and entry.random_score is not None and not entry.below:  # random at 0, threshold at 1
        normalised = [normalise(x, entry.random_score, entry.threshold) for x in seed_means]
    sps_logged = [s for s in map(median_sps, outcome.run_dirs) if s is not None]
    if status in ("pass", "fail") and sps_logged:
        sps = float(np.mean(sps_logged)) * entry.seeds
    elif status in ("pass", "fail"):
        sps = entry.total_timesteps * entry.seeds / max(outcome.wall_s - (outcome.compile_s or 0.0), 1e-9)
    else:
        sps = None
    result = {
        **asdict(entry),
        "name": entry.name,
        "status": status,
        "note": note,
        "eval_mean": mean,
        "eval_std": std,
        "seed_eval_means": seed_means,  # each seed's final score
        "iqm": score,
        "iqm_ci95": list(stratified_bootstrap_ci([seed_means])) if seed_means else None,
        "normalised_scores": normalised,  # each seed's
        "normalised_iqm": iqm(normalised) if normalised else None,
        "eval_curves": [eval_curve(e) for e in evals],  # each seed's (steps, mean returns)
        "wall_s": outcome.wall_s,
        "compile_s": outcome.compile_s,
        "env_steps_per_s": sps,
        "num_envs": num_envs_of(outcome.run_dirs[0]) if outcome.run_dirs else None,
        "curves": [learning_curve(d) for d in outcome.run_dirs],
        "run_seeds": [read_args(d).get("run_seed", i) for i, d in enumerate(scored, 1)],
        "algorithm_args": read_args(scored[0])
        if scored
        else {},  # benchmark/results.py keeps the algorithm's
        "algorithm_fingerprint": fingerprint,
        "run_dirs": [str(d) for d in outcome.run_dirs],
    }
    iqm_ci = ci_text(score, result["iqm_ci95"])
    print(f"  {entry.name} {entry.env}: {status} IQM {iqm_ci} (threshold {threshold_text(result)}) {note}")
    return result


def normalised_by_script(entries: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Per script, the normalised scores of each of its entries (envs) that ran and have a
    random score: one list of per-seed scores per entry."""
    tasks: dict[str, list[list[float]]] = {}
    for r in entries:
        if r["status"] in ("pass", "fail") and r.get("normalised_scores"):
            tasks.setdefault(Path(r["script"]).stem, []).append(r["normalised_scores"])
    return tasks


def aggregates(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per script: the IQM of the normalised scores of all its runs, every entry's seeds
    pooled, and its stratified bootstrap 95% CI (each entry's seeds resampled within it)."""
    return [
        {
            "script": script,
            "envs": len(scores),
            "runs": sum(map(len, scores)),
            "normalised_iqm": iqm(np.concatenate(scores)),
            "normalised_iqm_ci95": list(stratified_bootstrap_ci(scores)),
        }
        for script, scores in normalised_by_script(entries).items()
    ]


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
    probe = subprocess.run([sys.executable, "-c", DEVICE_PROBE], capture_output=True, text=True, cwd=ROOT)
    info = json.loads(probe.stdout) if probe.returncode == 0 else {"jax": None, "device_kind": None}
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
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    found = re.search(r"([0-9,]+) env steps/s", done.stdout)
    return float(found.group(1).replace(",", "")) if done.returncode == 0 and found else None


def budget(spec: dict[str, Any], quick: bool) -> int:
    return spec["quick_total_timesteps"] if quick else spec["total_timesteps"]


def seed_scaling(spec: dict[str, Any], quick: bool, out: Path) -> list[dict[str, Any]]:
    """Training time of 1, 8, 64 seeds vmapped in one program, and its ratio to 1 seed."""
    steps = budget(spec, quick)
    rows = []
    for seeds in spec["seeds"]:
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
    base = rows[0]["train_s"]
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
    found = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
    return python if found.returncode == 0 else None


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
# Report: results.json, the markdown table, learning curves, docs
# =====================================================================================


def threshold_text(r: dict[str, Any]) -> str:
    """An entry's threshold as the tables show it: "475", or "< 200" for an entry that must stay below."""
    return ("< " if r.get("below") else "") + f"{r['threshold']:g}"


def fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def ci_text(value: float | None, ci: list[float] | None) -> str:
    """'value [low, high]', two decimals."""
    return "–" if value is None or ci is None else f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def aggregate_table(rows: list[dict[str, Any]]) -> list[str]:
    """The per-script aggregate as markdown lines."""
    lines = [
        "| script | envs | runs | normalised IQM [95% CI] |",
        "|---|---|---|---|",
    ]
    for a in rows:
        lines.append(
            f"| {a['script']} | {a['envs']} | {a['runs']} "
            f"| {ci_text(a['normalised_iqm'], a['normalised_iqm_ci95'])} |"
        )
    return lines


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown tables: suite, seed scaling, peers."""
    m = report["machine"]
    lines = [
        f"`{m['command']}` — {m['date']}, {m['device_kind']} ({m['backend']}, {m['cpu_count']} CPU cores), "
        f"jax {m['jax']}, jaxlib {m['jaxlib']}",
        "",
        "| script | env | seeds | steps | eval return | IQM [95% CI] | normalised IQM | threshold | result "
        "| wall s | compile s | env steps/s | ceiling steps/s | % of ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["entries"]:
        ret = "–" if r["eval_mean"] is None else f"{r['eval_mean']:.1f} ± {r['eval_std']:.1f}"
        result = r["status"].upper() if r["status"] in ("fail", "crash", "timeout", "missing") else "pass"
        if r["note"]:
            result += f" ({r['note'][:80]})".replace("|", "/")
        ceil = r.get("ceiling_sps")
        frac = f"{100 * r['env_steps_per_s'] / ceil:.2g}" if ceil and r["env_steps_per_s"] else "–"
        lines.append(
            f"| {r['name']} | {r['env']} | {r['seeds']} | {r['total_timesteps']:,} | {ret} "
            f"| {ci_text(r.get('iqm'), r.get('iqm_ci95'))} | {fmt(r.get('normalised_iqm'), 2)} "
            f"| {threshold_text(r)} "
            f"| {result} | {fmt(r['wall_s'])} | {fmt(r['compile_s'])} | {fmt(r['env_steps_per_s'], 0)} "
            f"| {fmt(ceil, 0)} | {frac} |"
        )
    if report.get("aggregates"):
        lines += [
            "",
            "Per script: the IQM of the normalised scores (random 0, threshold 1), all envs' seeds pooled:",
        ]
        lines += ["", *aggregate_table(report["aggregates"])]
    if report.get("seed_scaling"):
        lines += ["", "Seed scaling (PPO CartPole-v1, seeds vmapped in one program; training time only):", ""]
        lines += ["| seeds | train s | compile s | time / 1 seed |", "|---|---|---|---|"]
        for r in report["seed_scaling"]:
            lines.append(
                f"| {r['seeds']} | {fmt(r['train_s'], 2)} | {fmt(r['compile_s'])} | {fmt(r['ratio'], 2)} |"
            )
    if report.get("peers"):
        lines += [
            "",
            "Peers (same env, budget and PPO hyperparameters, 1 seed, each in its own process):",
            "",
        ]
        lines += [
            "| system | result | wall s | compile s | train s | eval return | wall / ours | train / ours "
            "| return / ours |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["peers"]:
            result = f"{r['status']} {r.get('note', '')}".strip()
            lines.append(
                f"| {r['system']} | {result} | {fmt(r.get('wall_s'))} | {fmt(r.get('compile_s'))} "
                f"| {fmt(r.get('train_s'), 2)} | {fmt(r.get('eval_mean'))} | {fmt(r.get('wall_ratio'), 2)} "
                f"| {fmt(r.get('train_ratio'), 2)} | {fmt(r.get('return_ratio'), 2)} |"
            )
    return "\n".join(lines) + "\n"


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(entries: list[dict[str, Any]], out: Path) -> list[Path]:
    """One PNG per env, every script on it: the mean and 95% bootstrap band over seeds of the
    training return (solid) and of the deterministic evaluation return (dashed) vs env steps. The
    legend, beside the axes, names each script once (its colour) and the two line styles once."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    paths = []
    for env in dict.fromkeys(r["env"] for r in entries):
        rows = [r for r in entries if r["env"] == env]
        palette = plt.get_cmap("tab10" if len(rows) <= 10 else "tab20").colors  # a colour per script
        fig, ax = plt.subplots(figsize=(7, 4.5))
        handles = []
        for r, color in zip(rows, palette * len(rows), strict=False):
            seeds = 0
            for curves, style in ((r["curves"], "-"), (r.get("eval_curves", []), "--")):
                grid, mean, low, high = mean_ci_band([c for c in curves if len(c[0]) > 1])
                if len(grid) < 2:
                    continue
                seeds = max(seeds, sum(len(c[0]) > 1 for c in curves))
                ax.plot(grid, mean, style, color=color)
                ax.fill_between(grid, low, high, color=color, alpha=0.15)
            if seeds:
                label = f"{r['name']} ({seeds} seed{'s' if seeds > 1 else ''})"
                handles.append(Line2D([], [], color=color, label=label))
        if handles:
            handles += [
                Line2D([], [], color="k", ls=ls, label=kind) for ls, kind in (("-", "train"), ("--", "eval"))
            ]
            ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set(
            title=f"{env}: mean and 95% bootstrap CI over seeds", xlabel="env steps", ylabel="episodic return"
        )
        ax.grid(alpha=0.3)
        path = out / f"curves_{env.replace('/', '-')}.png"
        # the legend lies outside the axes: the saved box grows to hold it
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})  # no version stamp
        plt.close(fig)
        paths.append(path)
    return paths


def plot_profile(entries: list[dict[str, Any]], out: Path) -> Path | None:
    """profile.png: per script, the fraction of its runs (every env's seeds) whose normalised
    score exceeds tau; None when no entry has normalised scores."""
    runs = {script: np.concatenate(scores) for script, scores in normalised_by_script(entries).items()}
    if not runs:
        return None
    every = np.concatenate(list(runs.values()))
    taus = np.linspace(min(0.0, every.min()) - 0.05, max(1.0, every.max()) + 0.05, 400)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for script, scores in runs.items():
        ax.plot(taus, performance_profile(scores, taus), label=f"{script} ({len(scores)} runs)")
    ax.axvline(1.0, color="gray", linestyle=":", label="threshold")
    ax.set(
        title="Performance profiles",
        xlabel="normalised score τ (random policy 0, threshold 1)",
        ylabel="fraction of runs with score > τ",
        ylim=(-0.02, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = out / "profile.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def update_docs(report: dict[str, Any], table: str, plots: list[Path], docs: Path = DOCS_PATH) -> None:
    """Replace (or append) this preset's and backend's block in docs/benchmarks.md."""
    key = f"{report['preset']}-{report['machine']['backend']}"
    image_dir = docs.parent / "benchmarks"
    image_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for path in plots:
        target = image_dir / f"{key}-{path.name}"
        shutil.copy(path, target)
        images.append(f"![{path.stem}](benchmarks/{target.name})")
    table = re.sub(r"(?<= )/[^\s`]+", lambda found: Path(found.group(0)).name, table)  # no machine path
    start, end = f"<!-- results:{key} -->", f"<!-- /results:{key} -->"
    block = f"{start}\n{table}\n{' '.join(images)}\n{end}"
    text = docs.read_text() if docs.is_file() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + f"\n\n### {key}\n\n{block}\n"
    docs.write_text(text)


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
        default=ROOT / "docs" / "results",
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
        from benchmark.results import write_results_doc

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
    entries = select_entries(
        suite, quick, split(args.algos), split(args.envs), args.seeds, args.timeout, args.eval_points
    )
    entries = installed_entries(entries)
    out = args.out or ROOT / "benchmark" / "out" / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"preset": preset, "machine": machine_info(), "entries": [], "notes": args.note}
    print(f"benchmark ({preset}): {len(entries)} entries -> {out}")

    for entry in entries:
        report["entries"].append(run_entry(entry, out))
    if not args.no_ceiling:
        cache: dict[tuple[str, int], float | None] = {}
        for r in report["entries"]:
            if r["num_envs"] and r["env_steps_per_s"]:
                key = (r["env"], r["num_envs"] * r["seeds"])
                if key not in cache:
                    cache[key] = ceiling(*key)
                r["ceiling_sps"] = cache[key]
    if not args.no_seed_scaling and "seed_scaling" in suite:
        report["seed_scaling"] = seed_scaling(suite["seed_scaling"], quick, out)
    if args.peers and "peers" in suite:
        report["peers"] = run_peers(suite["peers"], quick, out)
    return write_outputs(report, out, args)


def write_outputs(report: dict[str, Any], out: Path, args: argparse.Namespace) -> int:
    """The aggregates, plots, results.json/.md and the docs asked for; 1 if any entry failed."""
    report["aggregates"] = aggregates(report["entries"])
    plots = plot_curves(report["entries"], out)
    plot_profile(report["entries"], out)
    table = markdown(report)
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "results.md").write_text(table)
    if args.docs:
        update_docs(report, markdown({**report, "aggregates": None}), plots)  # per script: docs/results.md
    if args.record and report["preset"] != "full":
        print(f"not recorded: a {report['preset']}-preset run (a row is an entry at its full budget)")
    elif args.record:
        from benchmark.results import write_records, write_results_doc

        write_records(report, args.results_dir)
        write_results_doc(args.results_dir, suite=args.suite)
    print(table)
    failed = [f"{r['name']} {r['env']}: {r['status']}" for r in report["entries"] if r["status"] != "pass"]
    print("FAILED: " + "; ".join(failed) if failed else "all checks passed")
    return 1 if failed or not report["entries"] else 0


if __name__ == "__main__":
    sys.exit(main())
