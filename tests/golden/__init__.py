"""The golden files: every shipped stack's `grpo-infra synth` tree, kept under `tests/golden/<stack>/`.

A renderer change then shows up in review as a diff of the files a user would apply, and
`tests/test_golden.py` fails until the trees are refreshed on purpose:

    .venv/bin/python -m tests.golden

re-renders every shipped stack here through the same `synth` command users run (and drops the tree of a
stack that no longer ships); `git diff tests/golden` is then the change to review.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.spec import list_stacks

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
REFRESH = ".venv/bin/python -m tests.golden"


def synth(stack: str, out: Path) -> dict[str, bytes]:
    """`grpo-infra synth STACK --out OUT`, and the tree it wrote under `OUT/STACK/` (path → bytes)."""
    result = CliRunner().invoke(app, ["synth", stack, "--root", str(ROOT), "--out", str(out)])
    if result.exit_code != 0:
        raise RuntimeError(f"grpo-infra synth {stack} failed ({result.exit_code}):\n{result.output}")
    return tree(out / stack)


def tree(where: Path) -> dict[str, bytes]:
    """Every file under `where`, by its path relative to it."""
    return {p.relative_to(where).as_posix(): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()}


def golden_stacks() -> list[str]:
    """The stacks that have a golden tree here (folders beside this module, caches aside)."""
    return sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def refresh() -> None:
    """Render every shipped stack into its golden tree, and remove the trees of stacks no longer shipped."""
    shipped = list_stacks(ROOT)
    for stack in shipped:
        files = synth(stack, GOLDEN)
        print(f"{stack}: {len(files)} files")
    for stale in sorted(set(golden_stacks()) - set(shipped)):
        shutil.rmtree(GOLDEN / stale)
        print(f"{stale}: removed (no such stack in stacks/)")
