"""--sweep: a grid of configurations trained with the seeds as one program per set of static values.

The traced flags (each script's Hyperparameters) are values in a run's state: a run whose state
holds other values trains exactly as a run built with those flags. The runs here are the
contract's tiny ones (tests/test_contract.py): they check the mechanism, not learning.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    exit_of_main,
    interrupt_after_compiling,
    load_script,
    only_run_dir,
    read_events,
    run_script,
    start_script,
    tree_equal,
)
from test_contract import SCRIPTS, read_state


def same_program(a: Any, b: Any) -> bool:
    """Two closed jaxprs are one program: the same equations, literals included, and the same constants."""
    return str(a.jaxpr) == str(b.jaxpr) and tree_equal(a.consts, b.consts)


def inner_jaxprs(eqn: Any) -> list[tuple[Any, list]]:
    """(sub-jaxpr, the outer operand each of its inputs is) for an equation that calls jaxprs: a scan, a
    while loop, a cond, a nested jit; [] for a primitive that computes."""
    params, operands = eqn.params, eqn.invars
    if eqn.primitive.name == "while":
        cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
        carry = operands[cond_n + body_n :]
        return [(params["cond_jaxpr"].jaxpr, [*operands[:cond_n], *carry]),
                (params["body_jaxpr"].jaxpr, [*operands[cond_n : cond_n + body_n], *carry])]  # fmt: skip
    if eqn.primitive.name == "cond":  # operand 0 picks the branch
        return [(branch.jaxpr, operands[1:]) for branch in params["branches"]]
    subs = [v for k, v in params.items() if k in ("jaxpr", "call_jaxpr", "fun_jaxpr")]
    return [(getattr(sub, "jaxpr", sub), operands) for sub in subs]


def computes_with(jaxpr: Any, var: Any) -> bool:
    """Whether an equation of jaxpr computes with var: a primitive takes it as an operand, or a scan, loop,
    cond or call passes it to one that does. Carried through a scan unread, it is not computed with."""
    for eqn in jaxpr.eqns:
        if not any(v is var for v in eqn.invars):
            continue
        subs = inner_jaxprs(eqn)
        if not subs or any(
            computes_with(sub, inner)
            for sub, outer in subs
            for inner, o in zip(sub.invars, outer, strict=True)
            if o is var
        ):
            return True
    return False


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_run_trains_with_the_traced_values_its_state_holds(name):
    """Built with other traced values, a script traces the same iteration and differs only in its
    state's values: a flag read as a constant would be a literal of its own, or another first state.
    And the iteration computes with every traced value its state holds (one stored and never read
    would be a flag that does nothing). Both are read off the traced program: nothing compiles."""
    module = load_script(name)
    base = module.parse_flags(module.Flags, [f for f in SCRIPTS[name].run if f != "--normalize-obs"])
    traced = module.Hyperparameters._fields
    assert "learning_rate" in traced or {"policy_lr", "q_lr"} <= set(traced)
    # every traced flag 10% off: inside every flag's allowed range (probabilities, coefficients, ...)
    other = dataclasses.replace(base, **{n: 0.9 * getattr(base, n) or 0.01 for n in traced})
    built, algo, key = module.make_algorithm(other), module.make_algorithm(base), jax.random.PRNGKey(0)
    swapped = algo.init(key)._replace(hyper=module.hyperparameters(other))
    assert tree_equal(swapped, built.init(key))
    iteration = lambda a: jax.make_jaxpr(a.iteration)(swapped, jnp.int32(0))
    program = iteration(algo)
    assert same_program(iteration(built), program)
    # the jaxpr's inputs are the leaves of (state, index), in order: those under state.hyper are the flags
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(swapped)[0]]
    hyper_inputs = [
        v
        for path, v in zip(paths, program.jaxpr.invars[:-1], strict=True)
        if path[0] == jax.tree_util.GetAttrKey("hyper")
    ]
    unread = [n for n, v in zip(traced, hyper_inputs, strict=True) if not computes_with(program.jaxpr, v)]
    assert not unread, f"traced flags the iteration never computes with: {unread}"


def conds_in(jaxpr: Any) -> int:
    """The lax.cond in a jaxpr, those inside scans, loops and other conds included."""
    found = 0
    for eqn in jaxpr.eqns:
        found += eqn.primitive.name == "cond"
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else [value]:
                found += conds_in(sub.jaxpr) if isinstance(sub, jax.extend.core.ClosedJaxpr) else 0
                found += conds_in(sub) if isinstance(sub, jax.extend.core.Jaxpr) else 0
    return found


REPLAY_SCRIPTS = [name for name in SCRIPTS if "--learning-starts" in " ".join(SCRIPTS[name].run)]


@pytest.mark.parametrize("name", REPLAY_SCRIPTS)
def test_a_skipped_gradient_step_is_skipped_also_when_seeds_train_together(name):
    """A lax.cond whose condition differs between the vmapped seeds (a value of the state) becomes a
    select that computes both branches every step: a gradient step every env step. Each cond of an
    iteration stays one when the seeds are vmapped (rainbow_jax's multi-seed runs were 10x slower)."""
    module = load_script(name)
    algo = module.make_algorithm(module.parse_flags(module.Flags, SCRIPTS[name].run))
    key, index = jax.random.PRNGKey(0), jnp.int32(0)
    one_seed = jax.make_jaxpr(algo.iteration)(jax.eval_shape(algo.init, key), index)
    seeds = jax.eval_shape(jax.vmap(algo.init), jax.random.split(key, 2))
    two_seeds = jax.make_jaxpr(jax.vmap(algo.iteration, in_axes=(0, None)))(seeds, index)
    one, two = conds_in(one_seed.jaxpr), conds_in(two_seeds.jaxpr)
    assert one >= 1 and two == one, f"{one} lax.cond for one seed, {two} for two"


PPO_TINY = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "640", "--num-chunks", "2",
            "--eval-episodes", "4"]  # fmt: skip
DQN_TINY = SCRIPTS["dqn_jax"].run[:-4] + ["--num-chunks", "3", "--eval-episodes", "4"]  # 1,200 steps


def final_states(module, output_dir: Path) -> dict[str, Any]:
    """run directory name -> its newest checkpoint's state."""
    return {d.name.rsplit("__", 1)[0]: read_state(module, d)[1] for d in run_dirs(output_dir)}


def run_dirs(output_dir: Path) -> list[Path]:
    return sorted(d for d in output_dir.iterdir() if d.is_dir() and "__sweep__" not in d.name)


def test_a_sweep_writes_a_run_per_configuration_and_seed_and_ranks_them(tmp_path):
    """The issue's command, at a tiny budget: 3 x 2 configurations x 2 seeds, one program."""
    sweep = ["--sweep", "learning_rate=1e-4,2.5e-4,1e-3", "ent_coef=0,0.01", "--num-seeds", "2"]
    result = run_script("ppo_jax_scan", *PPO_TINY, *sweep, "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "6 configurations x 2 seed(s) = 12 runs, in 1 program(s)" in result.stdout
    assert result.stdout.count("compiled one chunk") == 1
    dirs = run_dirs(tmp_path)
    assert len(dirs) == 12 and all((d / "eval.json").is_file() and read_events(d) for d in dirs)
    record = json.loads((dirs[0] / "args.json").read_text())
    assert record["sweep"] == sweep[1:3] and record["learning_rate"] in (1e-4, 2.5e-4, 1e-3)
    (folder,) = tmp_path.glob("*__sweep__*")
    summary = json.loads((folder / "sweep.json").read_text())
    assert len(summary["configs"]) == 6
    ranks = [(-c["iqm"], -c["ci95"][0]) for c in summary["configs"]]  # a tie: the higher lower end first
    assert ranks == sorted(ranks)
    for config in summary["configs"]:
        low, high = config["ci95"]
        assert min(config["final_returns"]) <= low <= config["iqm"] <= high <= max(config["final_returns"])
        for name in config["run_dirs"]:  # each run's eval.json is the one ranked
            returns = json.loads((tmp_path / name / "eval.json").read_text())["mean"]
            assert returns in config["final_returns"]
    winner = summary["configs"][0]
    assert summary["winner"] == winner["command"] and f"Winner: `{winner['command']}`" in result.stdout
    assert "--seed 3" in winner["command"] and "fresh seeds" in result.stdout
    script = load_script("ppo_jax_scan")
    command = script.parse_flags(script.Flags, winner["command"].split()[2:])  # as a user runs it
    assert {name: getattr(command, name) for name in winner["values"]} == winner["values"]
    assert (command.num_envs, command.seed, command.num_seeds, command.sweep) == (4, 3, 2, ())
    assert "| 1 | " + winner["config"] in (folder / "sweep.md").read_text()
    from PIL import Image

    with Image.open(folder / "sweep.png") as image:
        assert image.format == "PNG" and min(image.size) > 100


@pytest.mark.parametrize(  # the harness's layout: ppo_jax_scan stands for all; -m slow adds a replay buffer
    "name, tiny", [("ppo_jax_scan", PPO_TINY), pytest.param("dqn_jax", DQN_TINY, marks=pytest.mark.slow)]
)
def test_a_sweeps_run_equals_its_configuration_run_alone(name, tiny, tmp_path):
    """Two configurations x seed 1 on 2 devices, against the first configuration x seed 1 alone: one run per
    device, each device runs its run unbatched (seeds_program), as a run alone does, so run (first
    configuration, seed 1) is bitwise the same. A replay buffer (dqn_jax) included."""
    module = load_script(name)
    swept = run_script(name, *tiny, "--cpu-devices", "2", "--seed", "1", "--sweep", "learning_rate=1e-3,3e-4",
                       "--output-dir", str(tmp_path / "sweep"))  # fmt: skip
    alone = run_script(name, *tiny, "--cpu-devices", "1", "--seed", "1", "--learning-rate", "1e-3",
                       "--output-dir", str(tmp_path / "alone"))  # fmt: skip
    assert swept.returncode == 0 and alone.returncode == 0, swept.stderr + alone.stderr
    assert "on 2 device(s)" in swept.stdout and "on 1 device(s)" in alone.stdout
    (a,) = [d for d in run_dirs(tmp_path / "sweep") if "learning_rate=0.001__1__" in d.name]
    b = only_run_dir(tmp_path / "alone")
    assert tree_equal(read_state(module, a)[1], read_state(module, b)[1])
    (other,) = [d for d in run_dirs(tmp_path / "sweep") if "learning_rate=0.0003__1__" in d.name]
    assert not tree_equal(read_state(module, other)[1], read_state(module, b)[1])


@pytest.mark.slow  # 24 s: two programs, stopped and resumed; a stopped sweep resumes in test_faults (S1, S2)
def test_a_static_flag_compiles_a_program_per_value_and_a_stopped_sweep_resumes_exactly(tmp_path):
    """hidden_size (static) x learning_rate (traced): two programs, one ranking of the four configurations.
    The same sweep stopped by SIGTERM in its first program and resumed ends bitwise as the uninterrupted."""
    module = load_script("ppo_jax_scan")
    sweep = [*PPO_TINY[:-4], "--num-chunks", "6", "--eval-episodes", "4", "--sweep", "hidden_size=16,32",
             "learning_rate=1e-3,3e-4", "--cpu-devices", "2"]  # fmt: skip
    whole = run_script("ppo_jax_scan", *sweep, "--output-dir", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    assert "4 configurations x 1 seed(s) = 4 runs, in 2 program(s)" in whole.stdout
    assert whole.stdout.count("compiled one chunk") == 2
    (folder,) = (tmp_path / "whole").glob("*__sweep__*")
    ranked = json.loads((folder / "sweep.json").read_text())["configs"]
    assert {c["values"]["hidden_size"] for c in ranked} == {16, 32} and len(ranked) == 4

    process = start_script("ppo_jax_scan", *sweep, "--output-dir", str(tmp_path / "stopped"))
    out = interrupt_after_compiling(process, signal.SIGTERM)
    assert not list((tmp_path / "stopped").glob("*__sweep__*/sweep.json"))
    stopped = run_dirs(tmp_path / "stopped")
    assert not any((d / "eval.json").exists() for d in stopped)
    resume = re.search(r"--resume (\S+)", out).group(1)
    resumed = run_script("ppo_jax_scan", "--resume", resume)  # a process: its runs' 2 devices, as stopped
    assert resumed.returncode == 0, resumed.stderr
    expected, got = final_states(module, tmp_path / "whole"), final_states(module, tmp_path / "stopped")
    assert expected.keys() == got.keys() and len(got) == 4
    for run in expected:
        assert tree_equal(expected[run], got[run]), run
    (folder,) = (tmp_path / "stopped").glob("*__sweep__*")
    without_names = lambda configs: [{k: v for k, v in c.items() if k != "run_dirs"} for c in configs]
    assert without_names(json.loads((folder / "sweep.json").read_text())["configs"]) == without_names(ranked)


BAD_SWEEPS = [
    (["--sweep", "foo=1,2"], "--sweep foo: not a flag it sweeps; those are total_timesteps, learning_rate"),
    (["--sweep", "seed=1,2"], "--sweep seed: not a flag it sweeps"),
    (["--sweep", "learning_rate=1e-3", "learning_rate=1e-4"], "--sweep learning_rate: given twice"),
    (
        ["--learning-rate", "0.1", "--sweep", "learning_rate=1e-3,1e-4"],
        "--sweep learning_rate: also given as --learning-rate",
    ),  # fmt: skip
    (["--sweep", "learning_rate=fast"], "--sweep learning_rate=fast: --learning-rate takes a float"),
    (["--sweep", "num_envs=4,4.5"], "--sweep num_envs=4.5: --num-envs takes a int"),
    (["--sweep", "norm_adv=True,yes"], "--sweep norm_adv=yes: --norm-adv takes True, False"),
    (["--sweep", "network=mlp,rnn"], "--sweep network=rnn: --network takes mlp, cnn"),
    (["--sweep", "learning_rate=1e-3,1e-3"], "--sweep learning_rate: a value given twice"),
    (["--sweep", "learning_rate"], "--sweep learning_rate: write NAME=V1,V2,..."),
    (["--sweep", "ent_coef=0.1,-1", "gamma=0.9"], "--sweep ent_coef=-1.0 gamma=0.9: --ent-coef must be >= 0"),
]


@pytest.mark.parametrize("flags, message", BAD_SWEEPS)
def test_a_bad_sweep_exits_2_with_one_line_before_compiling(flags, message, tmp_path, capsys, monkeypatch):
    module = load_script("ppo_jax_scan")
    monkeypatch.setattr(module, "initial_state", lambda *_: pytest.fail("it went on to compile"))
    status, err = exit_of_main(module, [*flags, "--output-dir", str(tmp_path)], monkeypatch, capsys)
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_sweep_whose_replay_buffers_cannot_fit_is_refused_naming_its_runs(tmp_path, capsys, monkeypatch):
    module = load_script("dqn_jax")
    monkeypatch.setattr(module, "initial_state", lambda *_: pytest.fail("it went on to compile"))
    flags = ["--buffer-size", "20000000", "--sweep", "learning_rate=1e-3,1e-4", "gamma=0.9,0.99",
             "--num-seeds", "16", "--output-dir", str(tmp_path)]  # fmt: skip
    status, err = exit_of_main(module, flags, monkeypatch, capsys)
    named = "--buffer-size 20000000, --num-seeds 16, 64 runs (--sweep x --num-seeds)"
    assert status == 2 and named in err, err


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_help_marks_each_traced_flag(name, capsys, monkeypatch):
    module = load_script(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit):
        module.main(module.Flags)
    text = " ".join(capsys.readouterr().out.split())
    for flag in module.Hyperparameters._fields:
        assert re.search(rf"--{flag.replace('_', '-')} \S+ .*?\[traced\]", text), flag
    # once per traced flag, and once in --sweep's own help
    assert text.count("[traced]") == len(module.Hyperparameters._fields) + 1


def test_the_summary_statistics_are_benchmark_stats_ones():
    from benchmark import stats

    module, scores = load_script("ppo_jax_scan"), np.array([3.0, 1.0, 500.0, 7.0, 2.0, 9.0, 4.0])
    assert module.iqm(scores) == stats.iqm(scores)
    assert module.bootstrap(scores) == pytest.approx(stats.stratified_bootstrap_ci([scores]))


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_every_script_sweeps_its_learning_rates_in_one_program(name):
    module = load_script(name)
    rates = ["policy_lr", "q_lr"] if name == "sac_jax" else ["learning_rate"]
    args = module.Flags(sweep=tuple(f"{rate}=1e-3,1e-4" for rate in rates))
    configs = module.sweep_grid(args)
    assert len(configs) == 2 ** len(rates) and {getattr(c, rates[0]) for c in configs} == {1e-3, 1e-4}
    assert set(rates) <= set(module.Hyperparameters._fields)  # traced: one program for the grid
