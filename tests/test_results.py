"""Results as data (benchmark/results.py) and a user's run compared with them (benchmark/compare.py).

The fast tests use the fake script of test_benchmark.py (no jax) and run directories written by
hand; the repository's own page is checked against its own data.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest
from _helpers import ROOT
from test_benchmark import write_suite

sys.path.insert(0, str(ROOT))
bench = importlib.import_module("benchmark.run")  # the runner
suite_module = importlib.import_module("benchmark.suite")
results = importlib.import_module("benchmark.results")
compare = importlib.import_module("benchmark.compare")

FAKE_ENTRIES = """
[[entry]]
script = "FAKE"
env = "CartPole-v1"
total_timesteps = 1000
threshold = 50.0   # [made up] a reference
flags = { fake-return = 100.0 }

[[entry]]
script = "FAKE"
env = "Acrobot-v1"
total_timesteps = 1000
threshold = 50.0   # [made up] a reference
"""


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    """(the data folder, the suite): the fake suite's CartPole entry run with --full --record."""
    suite = write_suite(tmp_path, FAKE_ENTRIES)
    folder = tmp_path / "docs" / "results"
    flags = ["--suite", str(suite), "--out", str(tmp_path / "out"), "--no-ceiling", "--no-seed-scaling"]
    flags += ["--full", "--envs", "CartPole-v1", "--seeds", "3", "--record", "--results-dir", str(folder)]
    assert bench.main(flags) == 0
    return folder, suite


def test_a_recorded_entry_keeps_its_command_machine_seeds_and_curves(recorded):
    folder, suite = recorded
    (path,) = folder.glob("*.json")
    assert path.name == "fake_algo__CartPole-v1.json"
    record = json.loads(path.read_text())
    assert (
        record["command"].startswith("python ")
        and "--env-id CartPole-v1 --total-timesteps 1000" in record["command"]
    )
    assert "--fake-return 100.0" in record["command"] and "--num-seeds 3" in record["command"]
    assert record["date"][:4] == "2026" or record["date"][:2] == "20"
    assert record["machine"]["cores"] and record["machine"]["cpu"] and record["jax"] and record["jaxlib"]
    assert record["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+changes)?", record["commit"])
    assert [run["seed"] for run in record["runs"]] == [1, 2, 3]
    assert [run["score"] for run in record["runs"]] == [101.0, 102.0, 103.0]  # fake return + seed
    assert record["runs"][0]["eval_curve"] == [[500, 1000], [50.5, 101.0]]
    assert record["runs"][0]["train_curve"][0] == [250, 500, 750, 1000]
    assert record["algorithm_fingerprint"] == results.algorithm_fingerprint(Path(record["script"]))
    assert record["args"] == {"num_envs": 1}  # the algorithm flags: no run flag, no path


def test_a_curve_keeps_at_most_100_points_with_its_first_and_last():
    steps, values = list(range(0, 10_000, 7)), [float(i) / 3 for i in range(0, 10_000, 7)]
    kept_steps, kept_values = results.downsample(steps, values)
    assert len(kept_steps) == 100 and kept_steps[0] == 0 and kept_steps[-1] == steps[-1]
    assert kept_values[-1] == float(f"{values[-1]:.6g}")
    assert results.downsample([5, 6], [1.0, 2.0]) == [[5, 6], [1.0, 2.0]]


def test_the_page_is_made_from_the_data_alone_the_same_each_time_and_checked(recorded):
    folder, suite = recorded
    page = folder.parent / "results.md"
    first = page.read_bytes()
    assert results.write_results_doc(folder, suite=suite) == 0
    assert page.read_bytes() == first  # the same data: the same bytes
    text = first.decode()
    assert "| CartPole-v1 | 1,000 | 3 | 102.00 [101.00, 103.00] | 101.00, 102.00, 103.00 |" in text
    assert "[made up] a reference" in text and "## Not yet measured" in text
    assert "- fake_algo on Acrobot-v1, 1,000 steps" in text  # the entry without data is listed
    assert "**stale**:" not in text
    assert (folder.parent / "img" / "results-curves_CartPole-v1.png").stat().st_size > 1000
    assert results.write_results_doc(folder, check=True, suite=suite) == 0
    (path,) = folder.glob("*.json")
    record = json.loads(path.read_text())
    record["runs"][1]["score"] = 0.5  # a tampered data file
    path.write_text(json.dumps(record))
    assert results.write_results_doc(folder, check=True, suite=suite) == 1
    assert page.read_bytes() == first  # --check writes nothing


def test_a_row_whose_algorithm_or_entry_changed_is_marked_stale(recorded, tmp_path):
    folder, suite = recorded
    script = tmp_path / "fake_algo.py"
    page = folder.parent / "results.md"
    script.write_text(script.read_text() + "\n# a comment does not change the algorithm\n")
    results.write_results_doc(folder, suite=suite)
    assert "**stale**:" not in page.read_text()
    script.write_text(script.read_text() + "print('a changed program')\n")
    results.write_results_doc(folder, suite=suite)
    assert "**stale**: the algorithm changed since" in page.read_text()
    record_path = next(folder.glob("*.json"))
    record = json.loads(record_path.read_text())
    record["algorithm_fingerprint"] = results.algorithm_fingerprint(script)
    record_path.write_text(json.dumps(record))
    suite.write_text(suite.read_text().replace("fake-return = 100.0", "fake-return = 90.0"))
    results.write_results_doc(folder, suite=suite)
    assert "**stale**: the suite entry changed since" in page.read_text()


def test_the_fingerprint_ignores_comments_docstrings_and_the_harness(tmp_path):
    script = tmp_path / "algo.py"
    banner = "# --- harness: identical in every vibe_rl script ---"
    body = f'def loss(x):\n    """Its docstring."""\n    return x * 2\n\n{banner}\nA = 1\n'
    script.write_text(body)
    before = results.algorithm_fingerprint(script)
    script.write_text(body.replace("Its docstring.", "Another.").replace("A = 1", "A = 2") + "# end\n")
    assert results.algorithm_fingerprint(script) == before
    script.write_text(body.replace("x * 2", "x * 3"))
    assert results.algorithm_fingerprint(script) != before


def test_results_doc_runs_nothing_and_refuses_a_preset():
    with pytest.raises(SystemExit):
        bench.parse_args(["--results-doc", "--full"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--check"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--quick", "--record"])


def test_the_repository_page_is_what_its_data_gives():
    """docs/results.md is generated from docs/results/: regenerate it (python -m benchmark
    --results-doc) after adding or changing a data file."""
    assert results.write_results_doc(check=True) == 0
    size = sum(p.stat().st_size for p in results.RESULTS_DIR.glob("*.json"))
    assert size < 2 * 2**20, f"docs/results/ holds {size} bytes; the aim is under 2 MB"


# Full-preset entries without a row yet: they run for hours to days on the 2-core CPU, and are
# measured one at a time (docs/benchmarks.md, "Results as data"). The list only shrinks: an
# entry that gains a row must leave it, and a new entry must come with its row.
# Issue 82's entries (2026-12-08), to be recorded on the idle machine (hours): SimbaV2 and SAC's
# sample-efficient config at 100k env steps, and SimbaV2's Pendulum entry
NOT_YET_MEASURED: set[str] = {
    *(f"simbav2_jax__{env}" for env in ("Pendulum-v1", "playground-CheetahRun", "playground-WalkerWalk")),
    *(f"simbav2_jax__{env}" for env in ("playground-ReacherEasy", "playground-CartpoleBalance")),
    *(
        f"sac_jax__playground-{task}__sample-efficient"
        for task in ("CheetahRun", "WalkerWalk", "ReacherEasy", "CartpoleBalance")
    ),
}


def test_the_page_says_how_to_cite_a_row_and_its_links_resolve():
    page = (ROOT / "docs" / "results.md").read_text()
    (citing,) = [p for p in page.split("\n\n") if p.startswith("Citing:")]
    assert "[CITATION.cff](../CITATION.cff)" in citing and '"commit"' in citing
    links = re.findall(r"\]\(([^)#]+)\)", page)  # every relative link of the page, images too
    missing = [link for link in links if not (ROOT / "docs" / link).exists()]
    assert links and not missing, missing


def test_every_full_entry_has_a_row_of_three_seeds_or_more_unless_listed_as_not_yet_measured():
    entries = suite_module.select_entries(suite_module.load_suite(), quick=False)
    records = {results.tag_of(r): r for r in results.load_records()}
    tags = [suite_module.entry_tag(e.script, e.env, e.variant) for e in entries]
    missing = {tag for tag in tags if tag not in records}
    assert missing <= NOT_YET_MEASURED, (
        f"entries with no row in docs/results/: {sorted(missing - NOT_YET_MEASURED)}"
    )
    assert not NOT_YET_MEASURED & set(records), "measured now: take them off NOT_YET_MEASURED"
    assert not NOT_YET_MEASURED - set(tags), "not suite entries any more"
    for tag, record in records.items():
        assert len(record["runs"]) >= 3, f"{tag}: {len(record['runs'])} seeds"
        assert all(
            len(run["eval_curve"][0]) <= 100 and len(run["train_curve"][0]) <= 100 for run in record["runs"]
        )


def test_run_keys_are_the_harness_run_flags_and_what_it_adds():
    tree = ast.parse((ROOT / "tests" / "harness.py").read_text())
    (run_flags,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunFlags"]
    fields = {n.target.id for n in run_flags.body if isinstance(n, ast.AnnAssign)}
    added = {"script", "run_seed", "run_name", "run_stamp", "sizes"}  # open_run_dirs adds these to args.json
    assert fields | added == results.RUN_KEYS, results.RUN_KEYS ^ (fields | added)
    assert all(f'"{key}"' in (ROOT / "tests" / "harness.py").read_text() for key in added)


def test_no_absolute_path_of_a_machine_in_the_readme_or_the_docs():
    pattern = re.compile(r"(?<![\w.])/(work|tmp|home|root|Users|opt|mnt)/")
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


# --- python -m benchmark.compare ---------------------------------------------------------------


def write_run(directory: Path, score: float, **args) -> Path:
    """A run directory as a script writes it: args.json, eval.json, metrics.jsonl."""
    directory.mkdir(parents=True)
    record = {"script": "ppo_jax_scan.py", "env_id": "CartPole-v1", "total_timesteps": 1000, "num_envs": 8}
    record |= {"seed": 9, "output_dir": str(directory.parent), "run_seed": 9} | args
    (directory / "args.json").write_text(json.dumps(record))
    curve = [{"global_step": 500, "mean": score / 2}, {"global_step": 1000, "mean": score}]
    (directory / "eval.json").write_text(json.dumps({"mean": score, "eval_curve": curve}))
    points = [{"global_step": s, "charts/episodic_return": score * s / 1000} for s in (250, 500, 750, 1000)]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
    return directory


@pytest.fixture
def ours(tmp_path: Path) -> Path:
    """A data folder with one entry: ppo_jax_scan on CartPole-v1, 3 seeds scoring 90, 100, 110."""
    folder = tmp_path / "results"
    folder.mkdir()
    curve = [[250, 500, 750, 1000], [20.0, 50.0, 80.0, 100.0]]
    runs = [
        {"seed": s, "score": x, "eval_curve": curve, "train_curve": curve}
        for s, x in ((1, 90.0), (2, 100.0), (3, 110.0))
    ]
    record = {
        "script": "vibe_rl/ppo_jax_scan.py", "env": "CartPole-v1", "variant": "", "total_timesteps": 1000,
        "command": "python vibe_rl/ppo_jax_scan.py --env-id CartPole-v1", "threshold": 95.0,
        "random_score": 20.0, "machine": {"backend": "cpu", "cpu": "x", "cores": 2},
        "args": {"env_id": "CartPole-v1", "total_timesteps": 1000, "num_envs": 8}, "runs": runs,
    }  # fmt: skip
    (folder / "ppo_jax_scan__CartPole-v1.json").write_text(json.dumps(record))
    return folder


def test_compare_names_the_entry_prints_a_line_per_run_and_plots(ours, tmp_path, capsys):
    runs = [
        write_run(tmp_path / "sweep" / name, score)
        for name, score in (("a", 50.0), ("b", 105.0), ("c", 200.0), ("d", 89.9999999))
    ]
    before = {p: p.read_bytes() for run in runs for p in run.iterdir()}
    out = tmp_path / "compare.png"
    assert compare.main([str(tmp_path / "sweep"), "--results", str(ours), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ours_text = "ours (ppo_jax_scan on CartPole-v1, 1,000 steps, 3 seeds): IQM 100.00 ["
    assert lines[0].startswith("a: 50.00, below our seeds' range; " + ours_text)
    assert lines[1].startswith("b: 105.00, within") and lines[2].startswith("c: 200.00, above")
    assert lines[3].startswith("d: 90.00, within")  # our lowest seed, as the data rounds it
    assert lines[4:] == [f"wrote the plot: {out.resolve()}"] and out.stat().st_size > 1000
    assert {p: p.read_bytes() for run in runs for p in run.iterdir()} == before  # the runs are not modified


def test_compare_says_in_one_line_when_the_flags_differ_or_no_entry_matches(ours, tmp_path, capsys):
    other = write_run(tmp_path / "other", 100.0, num_envs=4)
    assert compare.main([str(other), "--results", str(ours), "--out", str(tmp_path / "x.png")]) == 2
    (said,) = capsys.readouterr().out.splitlines()
    assert "flags differ" in said and "--num-envs 4 (ours 8)" in said and "--anyway" in said
    assert not (tmp_path / "x.png").exists()
    assert (
        compare.main([str(other), "--results", str(ours), "--out", str(tmp_path / "x.png"), "--anyway"]) == 0
    )
    assert "within" in capsys.readouterr().out and (tmp_path / "x.png").is_file()
    pendulum = write_run(tmp_path / "pendulum", -150.0, env_id="Pendulum-v1")
    assert compare.main([str(pendulum), "--results", str(ours)]) == 2
    (said,) = capsys.readouterr().out.splitlines()
    assert said.startswith("pendulum: we have no row of ppo_jax_scan.py on Pendulum-v1 at 1,000 steps")
    assert compare.main([str(tmp_path / "nothing_here"), "--results", str(ours)]) == 2


def test_compare_says_where_it_wrote_the_plot_and_never_replaces_one_silently(
    ours, tmp_path, capsys, monkeypatch
):
    run = str(write_run(tmp_path / "runs" / "a", 105.0))
    monkeypatch.chdir(tmp_path)  # the default --out, compare.png, is written here
    assert compare.main([run, "--results", str(ours)]) == 0
    plotted = tmp_path / "compare.png"
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote the plot: {plotted.resolve()}"
    plotted.write_bytes(b"a plot of yours")
    assert compare.main([run, "--results", str(ours)]) == 2
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("a: 105.00, within")  # the lines are printed all the same
    assert said[-1] == "the plot is not written: compare.png exists (--out another path, or --overwrite)"
    assert plotted.read_bytes() == b"a plot of yours"
    assert compare.main([run, "--results", str(ours), "--overwrite"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"replaced the plot: {plotted.resolve()}"
    assert plotted.stat().st_size > 1000
    elsewhere = tmp_path / "plots" / "mine.png"  # a folder that does not exist yet
    assert compare.main([run, "--results", str(ours), "--out", str(elsewhere)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote the plot: {elsewhere.resolve()}"
    assert elsewhere.stat().st_size > 1000
