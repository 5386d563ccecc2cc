"""What every command shares: finding the project, loading a stack, exiting with the right code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from ..spec import SpecError, Stack, load_stack

# Exit codes: the contract scripts and CI rely on.
OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

RootOption = Annotated[
    Path | None,
    typer.Option("--root", help="Project directory holding stacks/ (default: the nearest one above here)."),
]


def project_root(root: Path | None) -> Path:
    """The given root, or the nearest directory at or above the working directory with stacks/."""
    if root is not None:
        if not (root / "stacks").is_dir():
            fail(f"{root}: not a grpo-infra project (no stacks/ directory)")
        return root
    here = Path.cwd()
    for candidate in (here, *here.parents):
        if (candidate / "Pulumi.yaml").is_file() and (candidate / "stacks").is_dir():
            return candidate
    return here


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    """Print one readable error and exit; never a traceback for bad input."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


def load(stack: str, root: Path | None) -> Stack:
    """Load a stack or exit 2 with a message naming the file, field path and expectation."""
    try:
        return load_stack(stack, project_root(root))
    except SpecError as exc:
        fail(_escape(exc.render()))


def _escape(text: str) -> str:
    """User input (a stack's keys and values) printed through Rich: brackets are text, not markup."""
    return escape(text)
