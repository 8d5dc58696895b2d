"""docs/commands.md: every suite entry's command, as a user types it to train that (script, env)
at the configuration the full suite runs.

    python -m benchmark.commands            # write docs/commands.md from benchmark/suite.toml
    python -m benchmark.commands --check    # exit 1, writing nothing, if the page is not current

The flags come from benchmark/suite.py's `entry_flags`, the ones `python -m benchmark --full` runs
each entry with, less the harness's own (HARNESS_ONLY): a command here trains what the suite
trains. tests/test_benchmark.py checks that the committed page is what this writes now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.suite import ROOT, SUITE, Entry, entry_flags, load_suite, select_entries

PAGE = ROOT / "docs" / "commands.md"
WIDTH = 100  # a longer command is continued on the next line with a backslash

# The flags the harness adds for itself, with their values: the script's defaults (--seed 1,
# --exp-name the script's name) and the evaluation curve of docs/results.md (--eval-frequency).
HARNESS_ONLY = ("--seed", "--exp-name", "--eval-frequency")

INTRO = """\
# Commands of the suite

Written by `python -m benchmark.commands` from [benchmark/suite.toml](../benchmark/suite.toml);
regenerate it, do not edit it by hand (a test checks that it is current).

Each command trains one entry of the suite as `python -m benchmark --full` trains it: the
entry's tuned flags, its step budget and its seeds, trained together in one program
(`--num-seeds`; seeds 1, 2, ...). Its scores, with their intervals and curves, are in
[results.md](results.md); why each entry has its flags is the comment above it in suite.toml.

The benchmark adds flags of its own, left out here: `--seed 1` and `--exp-name` with the
script's name (the scripts' defaults), `--eval-frequency` (the evaluation curve of
results.md; without it a run evaluates once, at the end) and `--output-dir` (where it keeps
its runs; a script writes to `runs/` by default). With `--num-seeds 1` a script trains seed 1
alone, unbatched: its numbers then differ from the same seed's in a batch by float rounding.
"""


def command(entry: Entry) -> str:
    """`python {script} {flags}`, less HARNESS_ONLY's flags and their values, wrapped at WIDTH."""
    flags = entry_flags(entry)
    kept = []
    for i, part in enumerate(flags):
        dropped = part in HARNESS_ONLY or (i > 0 and flags[i - 1] in HARNESS_ONLY)
        if not dropped:
            kept.append(part)
    groups = [["python", entry.script]]  # a flag and its value stay on one line
    for part in kept:
        if part.startswith("--"):
            groups.append([part])
        else:
            groups[-1].append(part)
    lines = [" ".join(groups[0])]
    for group in groups[1:]:
        text = " ".join(group)
        if len(lines[-1]) + 1 + len(text) + 2 > WIDTH:  # room for " \\"
            lines[-1] += " \\"
            lines.append("    " + text)
        else:
            lines[-1] += " " + text
    return "\n".join(lines)


def label(entry: Entry) -> str:
    variant = f" ({entry.variant})" if entry.variant else ""
    bar = "a contrast, its IQM must stay below" if entry.below else "threshold"
    seeds = f"{entry.seeds} seed{'s' if entry.seeds > 1 else ''}"
    return f"**{entry.env}**{variant}: {seeds}, {bar} {entry.threshold:g}"


def page(suite: Path = SUITE) -> str:
    """The text of docs/commands.md: one section per script, one command per entry, in the
    suite's order."""
    entries = select_entries(load_suite(suite), quick=False)
    lines = [INTRO]
    for script in dict.fromkeys(Path(e.script).stem for e in entries):
        lines += [f"## {script}", ""]
        for entry in (e for e in entries if Path(e.script).stem == script):
            lines += [label(entry) + ":", "", "```bash", command(entry), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.commands", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/commands.md is not current")
    args = parser.parse_args(argv)
    text = page()
    if args.check:
        current = PAGE.is_file() and PAGE.read_text() == text
        state = "current" if current else "stale: run python -m benchmark.commands"
        print(f"{PAGE.relative_to(ROOT)} is {state}")
        return 0 if current else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
