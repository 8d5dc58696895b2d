"""Write the run harness's one source, tests/harness.py, below the banner of every script.

    python tests/sync_harness.py           # rewrite every vibe_rl/*.py from its banner line to its end
    python tests/sync_harness.py --check   # write nothing; exit 1 naming each script that differs
    python tests/sync_harness.py --order   # list the uses of a harness name before its definition

The harness is the part of a script below the line that contains BANNER: the same text in every
script, so each file stands alone. A maintainer edits tests/harness.py (its text from that line on; the
line above it is the future import every script starts with), runs this command, and commits the source
and the scripts together; docs/harness.md is its page. Each script then ends with HANDOVER: the algorithm
above the banner handed to the harness by name, the harness taking nothing else from the script.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "harness.py"
BANNER = "identical in every vibe_rl script"
HANDOVER = """

# ===== What the algorithm above hands the harness: every flag of a run (Args', then RunFlags), carrying
# Args, Hyperparameters and make_algorithm, which is all the harness reads of the script (docs/harness.md)
Flags = flags_class(Args, Hyperparameters, make_algorithm)

if __name__ == "__main__":
    main(Flags)
"""
MOST_USES_BEFORE_DEFINITION = 10  # where a cycle forces it (EnvSpec's defaults are functions that take one)


def scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "vibe_rl").glob("*.py") if p.name != "__init__.py")


def harness_text(source: str) -> str:
    """What every script holds from its banner line on: the source's text from that line, then HANDOVER."""
    lines = source.splitlines(keepends=True)
    return "".join(lines[next(i for i, line in enumerate(lines) if BANNER in line) :]) + HANDOVER


def synced(script: str, harness: str) -> str:
    """The script's text up to its banner line, then the harness (harness_text: from that line on)."""
    lines = script.splitlines(keepends=True)
    banners = [i for i, line in enumerate(lines) if BANNER in line]
    if len(banners) != 1:
        raise ValueError(f"the banner ({BANNER!r}) appears {len(banners)} times, not once")
    return "".join(lines[: banners[0]]) + harness


def uses_before_definition(source: str) -> list[tuple[int, str]]:
    """(line, name) of each use of a module-level name of `source` on a line before the name's definition
    (inside functions and annotations too): the harness reads top to bottom when there are few."""
    tree = ast.parse(source)
    defined: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            nodes = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = [t.id for t in nodes if isinstance(t, ast.Name)]
        else:
            targets = []
        for name in targets:
            defined.setdefault(name, node.lineno)
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in defined]
    return sorted((n.lineno, n.id) for n in uses if n.lineno < defined[n.id])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a script differs")
    parser.add_argument("--order", action="store_true", help="list the uses of a name before its definition")
    options = parser.parse_args(argv)
    check, harness = options.check, SOURCE.read_text()
    if options.order:
        uses = uses_before_definition(harness)
        for line, name in uses:
            print(f"{SOURCE.relative_to(ROOT)}:{line}: {name} is defined further down")
        print(f"{len(uses)} use(s) before the definition (at most {MOST_USES_BEFORE_DEFINITION})")
        return int(len(uses) > MOST_USES_BEFORE_DEFINITION)
    if sum(BANNER in line for line in harness.splitlines()) != 1:
        print(f"{SOURCE.relative_to(ROOT)}: it must hold the banner line once", file=sys.stderr)
        return 1
    harness = harness_text(harness)
    differ, broken = [], []
    for path in scripts():
        text = path.read_text()
        try:
            new = synced(text, harness)
        except ValueError as error:  # said, and the other scripts are still written
            print(f"{path.relative_to(ROOT)}: {error}", file=sys.stderr)
            broken.append(path)
            continue
        if new == text:
            continue
        differ.append(str(path.relative_to(ROOT)))
        if not check:
            temporary = path.with_name(path.name + ".tmp")
            temporary.write_text(new)
            temporary.replace(path)  # atomic: an editor or a test never reads half a script
    if check and differ:
        print(f"harness differs from tests/harness.py in: {', '.join(differ)}", file=sys.stderr)
        print("run: python tests/sync_harness.py", file=sys.stderr)
        return 1
    print(f"{'differ' if check else 'rewrote'}: {', '.join(differ) or 'none'}")
    return int(bool(broken))


if __name__ == "__main__":
    sys.exit(main())
