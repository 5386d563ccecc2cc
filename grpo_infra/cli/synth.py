"""`grpo-infra synth`: write everything a stack would apply, for review and for CI."""

from __future__ import annotations

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
        fail(f"cannot write {out / stack}: {exc.strerror or exc}")
    summary(stack, files, out / stack)


def summary(stack: str, files: dict[str, str], where: Path) -> None:
    """A table of what was written, by part."""
    table = Table(title=f"{stack} → {where}")
    for column in ("part", "files", "bytes"):
        table.add_column(column, justify="left" if column == "part" else "right")
    parts: dict[str, list[str]] = {}
    for path, text in files.items():
        parts.setdefault(path.split("/", 1)[0], []).append(text)
    for part, texts in sorted(parts.items()):
        table.add_row(part, str(len(texts)), str(sum(len(t.encode()) for t in texts)))
    console.print(table)
