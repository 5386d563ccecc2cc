"""`grpo-infra synth`: write everything a stack would apply, for review and for CI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import synth as synthesis
from .check import refuse_if_infeasible
from .common import RootOption, console, fail, load


def synth(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")],
    out: Annotated[Path, typer.Option("--out", help="Output directory; files go to OUT/STACK/.")] = Path("build"),
    root: RootOption = None,
) -> None:
    """Render STACK's Kubernetes objects, Helm releases and Slurm files to OUT/STACK/."""
    loaded = load(stack, root)
    refuse_if_infeasible(stack, loaded.environment)
    files = synthesis.render(loaded.environment)
    out = out if out.is_absolute() else Path.cwd() / out
    try:
        synthesis.write_tree(files, out / stack)
    except OSError as exc:
        fail(f"cannot write {out / stack}: {unwritable_because(out / stack, exc)}")
    summary(stack, files, out / stack)


def unwritable_because(target: Path, exc: OSError) -> str:
    """The real cause of a failed write, named by path: errno's text alone ("File exists", "No such file
    or directory") says neither which path nor why."""
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing != target and not existing.is_dir():
        return f"{existing} is a file, not a directory"
    blocked = Path(exc.filename) if exc.filename else existing
    if blocked.exists() and not blocked.is_dir() and blocked != target:
        return f"{blocked} is a file, not a directory"
    if not os.access(existing, os.W_OK):
        return f"{existing} is not writable by this user"
    return f"{existing} does not take new files ({exc.strerror or exc}): a read-only or virtual file system"


def summary(stack: str, files: dict[str, str], where: Path) -> None:
    """A line naming where the files went, then a table of them by part. The line is not the table's
    title: rich wraps a title to the table's width, which broke a long path into three lines."""
    console.print(f"{stack} → {where}", highlight=False, soft_wrap=True)
    table = Table()
    for column in ("part", "files", "bytes"):
        table.add_column(column, justify="left" if column == "part" else "right")
    parts: dict[str, list[str]] = {}
    for path, text in files.items():
        parts.setdefault(path.split("/", 1)[0], []).append(text)
    for part, texts in sorted(parts.items()):
        table.add_row(part, str(len(texts)), str(sum(len(t.encode()) for t in texts)))
    console.print(table)
