"""vibe_rl against its peers, side by side in one run, on this machine.

    python -m benchmark.speed                        # every comparison (train, wall, seeds, dqn: about
                                                     # 25 minutes on 2 cores; rnn, td3, iqn add to it)
    python -m benchmark.speed --only train,dqn --rounds 2
    python -m benchmark.speed --only rnn,td3
    python -m benchmark.speed --only sweep --rounds 3
    python -m benchmark.speed --only td3 --rounds 1 --budget-scale 0.2   # a check that it runs, not a figure
    python -m benchmark.speed --only iqn
    python -m benchmark.speed --docs                 # + the table into README.md and docs/benchmarks.md

The comparisons (each figure is the best of --rounds processes, the variants interleaved
round by round; time on an idle machine: another job on the cores shifts every figure):

  train  PPO with CleanRL's CartPole config (4 envs x 128 steps, 4 epochs x 4 minibatches,
         lr 2.5e-4 annealed, 500k steps), the whole training as one jitted program, compiled
         apart and timed after: ours (`make_train`, benchmark/inprocess.py), PureJaxRL ppo.py's
         `make_train` and rejax's `PPO.train` (benchmark/peers/).
  wall   the whole process as a user runs it: `python vibe_rl/ppo_jax_scan.py --num-envs 4
         --num-steps 128 --total-timesteps 500000` with an empty compilation cache and again
         with the cache it filled, against rejax's whole process (its runner: imports,
         compile, training, a greedy evaluation, the run directory).
  seeds  `--num-seeds 8` against `--num-seeds 1` through the command line (the training time
         the script prints), on one CPU device (`--cpu-devices 1`) and on one per core (the
         default); PureJaxRL's `jax.vmap` of 8 seeds on one device for reference.
  dqn    DQN with PureJaxRL dqn.py's CartPole config (10 envs, 500k steps; ours:
         `--num-envs 10`, its other defaults are dqn.py's): `make_train` as one jit, ours
         against dqn.py's.
  rnn    PPO with a GRU core at PureJaxRL ppo_rnn.py's own CartPole config (4 envs x 128 steps,
         4 epochs x 4 minibatches of whole sequences, lr 2.5e-4 annealed, GRU of 128, 500k
         steps): ppo_rnn_jax's `make_train` (RNN, below) against ppo_rnn.py's, each one jit.
         The code still differs in activations and the time-limit bootstrap:
         benchmark/peers/purejaxrl_ppo_rnn.py's docstring lists it.
  sweep  `--sweep learning_rate=1e-4,2.5e-4,5e-4,1e-3 --num-seeds 2` (4 traced configurations x 2
         seeds, one program) against `--num-seeds 8` of one configuration, through the command
         line with CleanRL's CartPole config (the training time each prints, and how many
         programs it compiled); and rejax's population on the same grid: `vmap(PPO.create)` over
         the 4 rates, then `jit(vmap(vmap(train)))` over rates x seeds (rejax_ppo.py
         --learning-rates), timed after compiling. rejax does not anneal the rate; ours does.
  td3    TD3 at rejax's own Pendulum-v1 config (1 env, 10k steps, learning from 1000, batch
         100, lr 1e-3, 64-64 networks, ...): td3_jax's `make_train` (TD3, below) against rejax's
         `TD3.train`, each one jit; the runner gets the same td3_jax flags, which it maps onto
         rejax's names and units. benchmark/peers/rejax_td3.py's docstring lists the mapping and
         what still differs (rejax normalises observations, swish, clips gradients, ...).
  iqn    IQN at rejax's own CartPole-v1 config (1 env, 100k steps, a gradient step of batch 1 per
         env step from step 1000, N = N' = 64, K = 32, lr 3e-4, a Polyak target at 0.99 per step):
         iqn_jax's `make_train` (IQN, below) against rejax's `IQN.train`, each one jit; the runner
         gets the same iqn_jax flags, which it maps onto rejax's names. benchmark/peers/rejax_iqn.py's
         docstring lists the mapping and what still differs (the networks' widths, swish, ...).

--budget-scale F multiplies the training budgets of rnn, td3 and iqn (the others ignore it), for a
quick check that they run; the figures to report are taken at 1.

The peers run in their own venv (gymnax < 1.0): set VIBE_RL_PEERS_PYTHON and
VIBE_RL_PUREJAXRL_DIR as benchmark/peers/README.md says; a peer that is not set up is skipped.
Writes results.json and results.md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmark" / "peers"
COMPILED = re.compile(r"^compiled .* in ([0-9.]+)s", re.M)
TRAINED = re.compile(r"^trained [0-9,]+ steps(?: x .*?)? in ([0-9.]+)s", re.M)
PPO = ["--num-envs", "4", "--num-steps", "128", "--total-timesteps", "500000"]  # CleanRL's CartPole config
DOCS_BEGIN, DOCS_END = "<!-- speed:begin -->", "<!-- speed:end -->"

# PureJaxRL ppo_rnn.py's own config (its __main__ block) as vibe_rl/ppo_rnn_jax.py's Args fields.
RNN: dict[str, Any] = {
    "total_timesteps": 500_000,
    "num_envs": 4,
    "num_steps": 128,
    "update_epochs": 4,
    "num_minibatches": 4,
    "learning_rate": 2.5e-4,
    "anneal_lr": True,
    "clip_coef": 0.2,
    "clip_vloss": True,  # ppo_rnn.py clips the value loss
    "norm_adv": True,  # ppo_rnn.py normalises advantages per minibatch
    "ent_coef": 0.01,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "hidden_size": 128,  # ppo_rnn.py's GRU, embedding and head widths (fixed in its file)
}
# rejax 0.1.3's Pendulum-v1 TD3 config (configs/gymnax/pendulum.yaml) as td3_jax's Args fields,
# in td3_jax's units (noise in half the action range: Pendulum's is 2). benchmark/peers/rejax_td3.py.
TD3: dict[str, Any] = {
    "total_timesteps": 10_000,
    "num_envs": 1,
    "buffer_size": 10_000,
    "learning_starts": 1_000,  # rejax: fill_buffer
    "batch_size": 100,
    "learning_rate": 1e-3,
    "gamma": 0.99,
    "tau": 0.05,  # rejax: polyak 0.95
    "policy_frequency": 2,  # rejax: policy_delay
    "exploration_noise": 0.15,  # rejax: 0.3 (action units)
    "policy_noise": 0.1,  # rejax: target_noise 0.2
    "noise_clip": 0.25,  # rejax: target_noise_clip 0.5
    "hidden_size": 64,  # rejax: 64-64, fixed in its TD3.create_agent
}
# rejax 0.1.3's CartPole-v1 IQN config (configs/gymnax/cartpole.yaml) as iqn_jax's Args fields.
# benchmark/peers/rejax_iqn.py.
IQN: dict[str, Any] = {
    "total_timesteps": 100_000,
    "num_envs": 1,
    "buffer_size": 100_000,
    "learning_starts": 1_000,  # rejax: fill_buffer
    "batch_size": 1,
    "train_frequency": 1,  # rejax: num_epochs 1, a gradient step per iteration of one env step
    "num_tau_samples": 64,
    "num_tau_prime_samples": 64,
    "num_quantile_samples": 32,  # rejax: fixed in its network's q
    "quantile_embedding_dim": 64,  # rejax: its last hidden width (64)
    "learning_rate": 3e-4,
    "target_network_frequency": 1,  # rejax: target_update_freq
    "target_update_rate": 0.01,  # rejax: polyak 0.99
    "kappa": 1.0,
    "start_e": 1.0,
    "end_e": 0.01,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
}
# The fields each peer runner takes as flags (the rest it fixes: see its docstring).
# (purejaxrl_ppo_rnn.py: ANNEAL_LR on, and the value clipping, advantage normalisation and GRU width
# of ppo_rnn.py's code; rejax_td3.py: the 64-64 networks of rejax's TD3.create_agent.)
RNN_PEER_FLAGS = tuple(
    name for name in RNN if name not in ("anneal_lr", "clip_vloss", "norm_adv", "hidden_size")
)
TD3_PEER_FLAGS = tuple(name for name in TD3 if name != "hidden_size")
IQN_FIXED_BY_REJAX = ("train_frequency", "num_quantile_samples", "quantile_embedding_dim")
IQN_PEER_FLAGS = tuple(name for name in IQN if name not in IQN_FIXED_BY_REJAX)


def run(command: list[str], timeout: float = 1800) -> dict[str, Any]:
    """One process: its wall time, and the compile / training times it printed (the best
    training time when it trained several times)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    compiled, trained = COMPILED.findall(done.stdout), TRAINED.findall(done.stdout)
    return {
        "wall_s": wall,
        "compile_s": sum(map(float, compiled)) if compiled else None,
        "train_s": min(map(float, trained)) if trained else None,
        "programs": len(compiled),  # the programs it compiled (a script: one per chunk's shape)
    }


def best(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return min(values) if values else None


def interleave(variants: dict[str, list[str]], rounds: int, label: str) -> dict[str, dict[str, Any]]:
    """Run every variant once per round, in a rotated order; keep every sample."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            try:  # a variant that fails or hangs is reported, and the others still run
                result = run(variants[name], timeout=600)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"  [{label}] round {r + 1}: {name}: FAILED: {str(error).splitlines()[0]}")
                continue
            samples[name].append(result)
            print(
                f"  [{label}] round {r + 1}: {name}: "
                + ", ".join(f"{k} {v:.2f}" for k, v in result.items() if v)
            )
    return {
        name: {
            "train_s": best(s, "train_s"),
            "compile_s": best(s, "compile_s"),
            "wall_s": best(s, "wall_s"),
            "samples": s,
        }
        for name, s in samples.items()
    }


def peers_python() -> str | None:
    python = os.environ.get("VIBE_RL_PEERS_PYTHON")
    return python if python and Path(python).exists() else None


def purejaxrl_ready() -> bool:
    return peers_python() is not None and bool(os.environ.get("VIBE_RL_PUREJAXRL_DIR"))


def peer(runner: str, *flags: str) -> list[str]:
    """A peer runner of benchmark/peers/ in the peers' venv; one greedy evaluation episode
    (its result is not what is compared)."""
    return [str(peers_python()), str(PEERS / runner), *flags, "--eval-episodes", "1"]


def inprocess(script: str, *settings: str, repeats: int = 2) -> list[str]:
    command = [sys.executable, "-m", "benchmark.inprocess", script, "--repeats", str(repeats)]
    return command + [part for item in settings for part in ("--set", item)]


def scaled(settings: dict[str, Any], scale: float) -> dict[str, Any]:
    """settings with total_timesteps times scale (at least 1 step); 1: unchanged."""
    return {**settings, "total_timesteps": max(1, round(settings["total_timesteps"] * scale))}


def set_items(settings: dict[str, Any]) -> list[str]:
    """Args fields -> benchmark.inprocess's FIELD=VALUE items."""
    return [f"{name}={value}" for name, value in settings.items()]


def flags(settings: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """The named fields as a peer runner's flags, spelled as vibe_rl's: --num-envs 4 ..."""
    return [part for name in names for part in (f"--{name.replace('_', '-')}", str(settings[name]))]


def compare_train(rounds: int) -> dict[str, Any]:
    variants = {"vibe_rl": inprocess("ppo_jax_scan", "num_envs=4", "num_steps=128", "total_timesteps=500000")}
    if purejaxrl_ready():
        variants["PureJaxRL"] = peer("purejaxrl_ppo.py", "--repeats", "2")
    if peers_python():
        variants["rejax"] = peer("rejax_ppo.py", "--repeats", "2")
    return interleave(variants, rounds, "train")


def compare_wall(rounds: int, scratch: Path) -> dict[str, Any]:
    """Ours with an empty cache, then warm (the same cache, a second run), and rejax, per round."""
    results: dict[str, list[dict[str, Any]]] = {
        "vibe_rl, empty cache": [],
        "vibe_rl, warm cache": [],
        "rejax": [],
    }
    python = peers_python()
    for r in range(rounds):
        cache = scratch / f"cache-{r}"
        ours = [sys.executable, "vibe_rl/ppo_jax_scan.py", *PPO, "--output-dir", str(scratch / "runs")]
        ours += ["--jax-cache-dir", str(cache)]
        order = [("vibe_rl, empty cache", ours), ("vibe_rl, warm cache", ours)]
        if python:
            rejax = [python, str(PEERS / "rejax_ppo.py"), "--output-dir", str(scratch / "runs")]
            order = [("rejax", rejax), *order] if r % 2 == 0 else [*order, ("rejax", rejax)]
        for name, command in order:
            results[name].append(run(command))
            print(f"  [wall] round {r + 1}: {name}: {results[name][-1]['wall_s']:.1f}s")
    return {name: {"wall_s": best(s, "wall_s"), "samples": s} for name, s in results.items() if s}


def compare_seeds(rounds: int, scratch: Path) -> dict[str, Any]:
    variants = {}
    for devices, label in (("1", "one CPU device"), ("0", "one CPU device per core")):
        for seeds in ("1", "8"):
            command = [sys.executable, "vibe_rl/ppo_jax_scan.py", *PPO, "--num-seeds", seeds]
            command += [
                "--cpu-devices",
                devices,
                "--output-dir",
                str(scratch / "runs"),
                "--eval-episodes",
                "4",
            ]
            variants[f"vibe_rl, {seeds} seed(s), {label}"] = command
    if purejaxrl_ready():
        for seeds in ("1", "8"):
            variants[f"PureJaxRL, {seeds} seed(s), vmap on one device"] = peer(
                "purejaxrl_ppo.py", "--num-seeds", seeds
            )
    return interleave(variants, rounds, "seeds")


SWEEP_RATES = "1e-4,2.5e-4,5e-4,1e-3"  # the traced grid of the sweep comparison, 2 seeds each


def compare_sweep(rounds: int, scratch: Path) -> dict[str, Any]:
    ours = [sys.executable, "vibe_rl/ppo_jax_scan.py", *PPO, "--output-dir", str(scratch / "runs")]
    ours += ["--eval-episodes", "4"]
    variants = {
        "vibe_rl, sweep": [*ours, "--sweep", f"learning_rate={SWEEP_RATES}", "--num-seeds", "2"],
        "vibe_rl, 8 seeds": [*ours, "--num-seeds", "8"],
    }
    if peers_python():
        population = ["--learning-rates", SWEEP_RATES, "--num-seeds", "2", "--repeats", "2"]
        variants["rejax, population"] = peer("rejax_ppo.py", *population)
    return interleave(variants, rounds, "sweep")


def compare_dqn(rounds: int) -> dict[str, Any]:
    # dqn.py's config: its plain DQN and lr 2.5e-4 pinned, as dqn_jax's defaults now differ (Double DQN, 1e-4)
    variants = {"vibe_rl": inprocess("dqn_jax", "num_envs=10", "double_dqn=False", "learning_rate=0.00025")}
    if purejaxrl_ready():
        variants["PureJaxRL"] = peer("purejaxrl_dqn.py", "--repeats", "2")
    return interleave(variants, rounds, "dqn")


def compare_rnn(rounds: int, scale: float) -> dict[str, Any]:
    settings = scaled(RNN, scale)
    variants = {"vibe_rl": inprocess("ppo_rnn_jax", *set_items(settings))}
    if purejaxrl_ready():
        variants["PureJaxRL"] = peer(
            "purejaxrl_ppo_rnn.py", "--repeats", "2", *flags(settings, RNN_PEER_FLAGS)
        )
    return interleave(variants, rounds, "rnn")


def compare_td3(rounds: int, scale: float) -> dict[str, Any]:
    settings = scaled(TD3, scale)
    variants = {"vibe_rl": inprocess("td3_jax", *set_items(settings))}
    if peers_python():
        variants["rejax"] = peer("rejax_td3.py", "--repeats", "2", *flags(settings, TD3_PEER_FLAGS))
    return interleave(variants, rounds, "td3")


def compare_iqn(rounds: int, scale: float) -> dict[str, Any]:
    settings = scaled(IQN, scale)
    variants = {"vibe_rl": inprocess("iqn_jax", *set_items(settings))}
    if peers_python():
        variants["rejax"] = peer("rejax_iqn.py", "--repeats", "2", *flags(settings, IQN_PEER_FLAGS))
    return interleave(variants, rounds, "iqn")


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "–"


def seconds(x: float | None) -> str:
    return f"{x:.2f} s" if x is not None else "–"


def row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def table(results: dict[str, Any]) -> str:
    """The markdown table of whatever was measured."""
    rows = [row("comparison", "vibe_rl", "peer", "vibe_rl / peer", "aim"), row(*["---"] * 5)]
    if "train" in results:
        t = results["train"]
        ours = t["vibe_rl"]["train_s"]
        for peer, aim in (("PureJaxRL", "≤ 0.8"), ("rejax", "")):
            if peer in t:
                theirs = t[peer]["train_s"]
                what = "PPO training, CleanRL CartPole config, one jit"
                rows.append(row(what, seconds(ours), f"{peer} {seconds(theirs)}", ratio(ours, theirs), aim))
        compiles = ", ".join(f"{name} {seconds(v['compile_s'])}" for name, v in t.items())
        rows.append(row("its compile time", "", compiles, "", ""))
    if "wall" in results:
        w = results["wall"]
        rejax = w.get("rejax", {}).get("wall_s")
        for name, aim in (("vibe_rl, empty cache", "≤ 0.9"), ("vibe_rl, warm cache", "≤ 0.6")):
            what = f"whole process, 500k CartPole steps, {name.split(', ')[1]}"
            ours = w[name]["wall_s"]
            rows.append(row(what, seconds(ours), f"rejax {seconds(rejax)}", ratio(ours, rejax), aim))
    if "seeds" in results:
        s = results["seeds"]
        for label, aim in (("one CPU device", ""), ("one CPU device per core", "≤ 3.5")):
            one, eight = (s[f"vibe_rl, {n} seed(s), {label}"]["train_s"] for n in (1, 8))
            what = f"8 seeds / 1 seed, training time, {label}"
            rows.append(row(what, f"{seconds(eight)} / {seconds(one)} = {ratio(eight, one)}x", "", "", aim))
        if "PureJaxRL, 1 seed(s), vmap on one device" in s:
            one, eight = (s[f"PureJaxRL, {n} seed(s), vmap on one device"]["train_s"] for n in (1, 8))
            what = "PureJaxRL 8 seeds / 1 seed (vmap, one device)"
            rows.append(row(what, "", f"{seconds(eight)} / {seconds(one)} = {ratio(eight, one)}x", "", ""))
    if "sweep" in results:
        s = results["sweep"]
        sweep, eight = s["vibe_rl, sweep"]["train_s"], s["vibe_rl, 8 seeds"]["train_s"]
        programs = ", ".join(sorted({str(sample["programs"]) for sample in s["vibe_rl, sweep"]["samples"]}))
        what = f"sweep of 4 learning rates x 2 seeds / 8 seeds of one, training time ({programs} program(s))"
        rows.append(
            row(what, f"{seconds(sweep)} / {seconds(eight)} = {ratio(sweep, eight)}x", "", "", "≤ 1.1")
        )
        if "rejax, population" in s:
            theirs = s["rejax, population"]["train_s"]
            what = "the same sweep's training time, against rejax's vmap(PPO.create) population"
            rows.append(row(what, seconds(sweep), f"rejax {seconds(theirs)}", ratio(sweep, theirs), "≤ 1.0"))
    if "dqn" in results and "PureJaxRL" in results["dqn"]:
        ours, theirs = (results["dqn"][name]["train_s"] for name in ("vibe_rl", "PureJaxRL"))
        what = "DQN training, PureJaxRL dqn.py's CartPole config, one jit"
        rows.append(row(what, seconds(ours), f"PureJaxRL {seconds(theirs)}", ratio(ours, theirs), ""))
    for name, peer, what in (
        ("rnn", "PureJaxRL", "PPO-GRU training, PureJaxRL ppo_rnn.py's CartPole config, one jit"),
        ("td3", "rejax", "TD3 training, rejax's Pendulum-v1 config, one jit"),
        ("iqn", "rejax", "IQN training, rejax's CartPole-v1 config, one jit"),
    ):
        if name in results and peer in results[name]:
            ours, theirs = (results[name][variant]["train_s"] for variant in ("vibe_rl", peer))
            rows.append(row(what, seconds(ours), f"{peer} {seconds(theirs)}", ratio(ours, theirs), ""))
            compiles = ", ".join(
                f"{variant} {seconds(v['compile_s'])}" for variant, v in results[name].items()
            )
            rows.append(row("its compile time", "", compiles, "", ""))
    return "\n".join(rows)


def write_docs(block: str) -> None:
    for path in (ROOT / "README.md", ROOT / "docs" / "benchmarks.md"):
        text = path.read_text()
        if DOCS_BEGIN not in text:
            print(f"{path}: no {DOCS_BEGIN} marker, left alone")
            continue
        head, rest = text.split(DOCS_BEGIN, 1)
        path.write_text(head + DOCS_BEGIN + "\n" + block + "\n" + DOCS_END + rest.split(DOCS_END, 1)[1])
        print(f"wrote the table into {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default="train,wall,seeds,sweep,dqn,rnn,td3,iqn", help="comma-separated comparisons"
    )
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant, interleaved")
    parser.add_argument(
        "--budget-scale",
        type=float,
        default=1.0,
        help="multiply the training budgets of rnn, td3 and iqn (a quick check that they run; report at 1)",
    )
    parser.add_argument("--out", type=Path, default=None, help="default benchmark/out/speed-{time}")
    parser.add_argument(
        "--docs", action="store_true", help="write the table into README.md and docs/benchmarks.md"
    )
    cli = parser.parse_args()
    out = cli.out or ROOT / "benchmark" / "out" / f"speed-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    only = cli.only.split(",")
    import jax  # the versions, for the record

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, measure in (
            ("train", lambda: compare_train(cli.rounds)),
            ("wall", lambda: compare_wall(cli.rounds, Path(scratch))),
            ("seeds", lambda: compare_seeds(cli.rounds, Path(scratch))),
            ("sweep", lambda: compare_sweep(cli.rounds, Path(scratch))),
            ("dqn", lambda: compare_dqn(cli.rounds)),
            ("rnn", lambda: compare_rnn(cli.rounds, cli.budget_scale)),
            ("td3", lambda: compare_td3(cli.rounds, cli.budget_scale)),
            ("iqn", lambda: compare_iqn(cli.rounds, cli.budget_scale)),
        ):
            if name in only:
                print(f"{name}:")
                results[name] = measure()
    date = datetime.date.today().isoformat()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__} on {jax.default_backend()}"
    )
    command = "python -m benchmark.speed " + " ".join(sys.argv[1:])
    markdown = table(results)
    block = (
        f"Measured {date} on {machine} with `{command}` (best of {cli.rounds}, interleaved):\n\n{markdown}"
    )
    meta = {"date": date, "machine": machine, "command": command, "rounds": cli.rounds}
    meta["budget_scale"] = cli.budget_scale
    (out / "results.json").write_text(json.dumps({**meta, "results": results}, indent=2))
    (out / "results.md").write_text(block + "\n")
    print("\n" + block)
    if cli.docs:
        write_docs(block)


if __name__ == "__main__":
    main()
