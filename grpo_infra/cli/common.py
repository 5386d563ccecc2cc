"""What every command shares: finding the project, loading a stack, exiting with the right code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from ..spec import SpecError, Stack, load_stack


def _flags_show_no_type() -> None:
    """`--help` lists a flag without a value type, as Typer's plain help does (typer/core.py, TyperOption
    `get_help_record`: no type for `is_flag`/`count`); its Rich panel (typer/rich_utils.py,
    `_print_options_panel`, Typer 0.29) printed `<bool>` after every flag, as if it took a value."""
    rich_type = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag or self.count else rich_type(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()

# Exit codes: the contract scripts and CI rely on.
OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)
# Tables whose cells are names to copy (pods, nodes): wide enough that none is cut short.
wide_console = Console(width=max(console.width, 180))

RootOption = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="Project directory (holding Pulumi.yaml) whose stacks to use (default: the nearest one at or above here).",
    ),
]

# Pulumi's project file, either spelling (https://www.pulumi.com/docs/iac/concepts/projects/project-file/).
PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")
# Where grpo-infra reads stack files, relative to the project (its `stackConfigDir`).
STACKS_DIR = "stacks"


def _project_file(directory: Path) -> Path | None:
    return next((directory / name for name in PROJECT_FILES if (directory / name).is_file()), None)


def project_root(root: Path | None) -> Path:
    """The project whose stacks a command uses: `--root`, else found the way Pulumi finds its project.

    `--root` names the project directory (or any directory holding a `stacks/` of stack files).

    Pulumi takes the nearest directory at or above the working directory that holds `Pulumi.yaml`, and
    reads stack files from its `stackConfigDir` (https://www.pulumi.com/docs/iac/concepts/projects/).
    Anything else is bad input: one line, exit 2, whatever the working directory.
    """
    if root is not None:
        base = root.resolve()
        if _project_file(base) is None:
            # An explicit root may be a bare directory of stack files (a copy for review, a test's tree).
            if not (base / STACKS_DIR).is_dir():
                fail(f"--root {root}: not a grpo-infra project (no Pulumi.yaml and no {STACKS_DIR}/ there)")
            return base
    else:
        here = Path.cwd().resolve()
        found = next((d for d in (here, *here.parents) if _project_file(d) is not None), None)
        if found is None:
            fail(
                f"no Pulumi project (Pulumi.yaml) in {here} or above it: run inside a grpo-infra checkout or pass --root DIR"
            )
        base = found
    project = _project_file(base)
    assert project is not None
    try:
        document = yaml.safe_load(project.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError):
        fail(f"{project}: not valid YAML")
    config_dir = document.get("stackConfigDir") if isinstance(document, dict) else None
    if config_dir is None or Path(str(config_dir)) != Path(STACKS_DIR):
        fail(
            f"{project}: stackConfigDir is {config_dir!r}; grpo-infra reads the stacks from "
            f"{STACKS_DIR}/ (set `stackConfigDir: {STACKS_DIR}`)"
        )
    if not (base / STACKS_DIR).is_dir():
        fail(f"{project}: its stackConfigDir {base / STACKS_DIR} does not exist")
    return base


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    """Print one readable error and exit; never a traceback for bad input."""
    # emoji=False: a stack key such as `x:a:` is text, not the `:a:` emoji code Rich would substitute.
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, emoji=False, soft_wrap=True)
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
