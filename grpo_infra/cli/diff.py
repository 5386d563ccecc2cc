"""`grpo-infra diff`: what a pull request changes in a stack's rendered output.

The ref side is rendered by the ref's own code from the ref's own stack file (a `git archive` of
the ref, run in a subprocess), so a change to a renderer shows up just like a change to a stack.
"""

from __future__ import annotations

import difflib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import synth as synthesis
from ..archives import UnsafeArchive, extract_all
from ..spec.load import stack_path
from ..spec.strings import shown
from .common import BAD_INPUT, RootOption, console, fail, load, project_root


def diff(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")],
    against: Annotated[str, typer.Option("--against", help="Git ref to compare with.")] = "HEAD",
    root: RootOption = None,
) -> None:
    """Render STACK from the working tree and from a git ref; show a summary and a unified diff."""
    base = project_root(root)
    ours = synthesis.render(load(stack, base).environment)
    theirs = render_at_ref(stack, against, base)
    changes = compare(theirs, ours)
    table = Table(title=f"{stack}: {against} → working tree")
    for column in ("change", "file"):
        table.add_column(column)
    for change, path in changes:
        table.add_row(change, path)
    counts = {c: sum(1 for k, _ in changes if k == c) for c in ("added", "changed", "removed")}
    console.print(table)
    console.print(", ".join(f"{n} {c}" for c, n in counts.items()), highlight=False)
    for change, path in changes:
        lines = difflib.unified_diff(
            theirs.get(path, "").splitlines(keepends=True),
            ours.get(path, "").splitlines(keepends=True),
            fromfile=f"a/{path}" if change != "added" else "/dev/null",
            tofile=f"b/{path}" if change != "removed" else "/dev/null",
        )
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


def compare(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str]]:
    """(change, path) for every file added, changed or removed, sorted by path."""
    out = []
    for path in sorted(before.keys() | after.keys()):
        if path not in before:
            out.append(("added", path))
        elif path not in after:
            out.append(("removed", path))
        elif before[path] != after[path]:
            out.append(("changed", path))
    return out


def resolve_commit(ref: str, base: Path) -> str:
    """The commit `ref` names, or exit 2; the ref never reaches git where it would be read as an option.

    `--against=--output=FILE` passed to `git archive` would write (truncate) FILE; a ref starting with `-`
    is refused, and the rest is resolved after `--end-of-options`, so git takes it only as a revision."""
    if not ref or ref.startswith("-") or any(not c.isprintable() for c in ref):
        fail(f"--against {shown(ref)!r}: not a git ref (a branch, tag or commit; it may not start with `-`)")
    found = subprocess.run(
        ["git", "-C", str(base), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        fail(f"cannot read git ref {ref!r}: not a commit in {base}", BAD_INPUT)
    return found.stdout.strip()


def render_at_ref(stack: str, ref: str, base: Path) -> dict[str, str]:
    """Files the ref's code renders for the ref's version of the stack ({} if the stack is new)."""
    commit = resolve_commit(ref, base)
    archive = subprocess.run(
        ["git", "-C", str(base), "archive", "--format=tar", "--end-of-options", commit], capture_output=True
    )
    if archive.returncode != 0:
        fail(f"cannot read git ref {ref!r}: {archive.stderr.decode(errors='replace').strip()}", BAD_INPUT)
    with tempfile.TemporaryDirectory(prefix="grpo-infra-diff-") as tmp:
        tree = Path(tmp) / "tree"
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            try:
                extract_all(tar, tree)
            except UnsafeArchive as err:
                fail(f"git ref {ref!r} holds an unsafe path: {err}", BAD_INPUT)
        if not stack_path(stack, tree).is_file():
            return {}
        out = Path(tmp) / "out"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        run = subprocess.run(
            [sys.executable, "-m", "grpo_infra.cli", "synth", stack, "--out", str(out), "--root", str(tree)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tree,
        )
        if run.returncode != 0:
            fail(f"rendering {stack} at {ref} failed:\n{run.stderr.strip() or run.stdout.strip()}", BAD_INPUT)
        rendered = out / stack
        return {
            str(p.relative_to(rendered)): p.read_text(encoding="utf-8")
            for p in sorted(rendered.rglob("*"))
            if p.is_file()
        }
