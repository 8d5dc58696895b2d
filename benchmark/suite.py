"""The suite: benchmark/suite.toml read as entries, one (script, env) at one preset's budget each.

Per entry, suite.toml gives the script, the env, the tuned flags, the full step budget and
threshold (with its published source, the comment on its line), and optionally a `quick` table
that the quick preset applies over them; [defaults] gives the seeds, timeouts and evaluation
points; [random] the random policy's return per env. `select_entries` makes the entries of a
preset; `entry_flags` the command-line flags an entry's script runs with, the same that
docs/commands.md shows (benchmark/commands.py) and docs/results/ records (benchmark/results.py).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SUITE = Path(__file__).with_name("suite.toml")


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
    def tag(self) -> str:
        """The entry's name in paths and in --entries: ppo_rnn_jax__CartPole-v1__masked."""
        return entry_tag(self.script, self.env, self.variant)

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
    tags: list[str] | None = None,
) -> list[Entry]:
    """The suite's entries for a preset, filtered by script name and env, and by tag when given.

    --quick keeps the entries with a `quick` table and applies its budget, threshold, flags
    (and seeds, timeout, eval_points) over the full ones; [defaults] gives seeds, timeout and
    eval_points otherwise; seeds, timeout and eval_points given here override all. An entry's
    own `seeds` is the full preset's (what a seed costs at the full budget): --quick takes its
    table's, else quick_seeds. A quick threshold's source is "quick smoke threshold".
    `selected` says which entries --algos / --envs keep; `tags` (--entries) keeps the entries
    whose `Entry.tag` it lists.
    """
    defaults = suite.get("defaults", {})
    entries = []
    for raw in suite["entry"]:
        if quick and "quick" not in raw:
            continue
        if not selected(raw, algos, envs):
            continue
        if tags is not None and entry_tag(raw["script"], raw["env"], raw.get("variant", "")) not in tags:
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


def entry_tag(script: str, env: str, variant: str = "") -> str:
    """An entry's name in paths: ppo_jax_scan__CartPole-v1, ppo_rnn_jax__CartPole-v1__masked."""
    return f"{Path(script).stem}__{env.replace('/', '-')}" + (f"__{variant}" if variant else "")


def passes(score: float, threshold: float, below: bool) -> bool:
    """Whether an IQM passes: it reaches the threshold, or for a contrast (`below`) stays under it."""
    return score < threshold if below else score >= threshold


def entry_flags(entry: Entry) -> list[str]:
    """The flags an entry runs its script with (the runner adds --output-dir); benchmark/commands.py
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
