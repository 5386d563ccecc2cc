"""`grpo-infra check`: would this stack's gang ever be admitted, and would verl accept it?"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..check import Violation, violations, warnings
from ..spec import Environment
from .common import CHECK_FAILED, RootOption, console, err_console, load


def check(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the violations as a JSON list.")] = False,
    root: RootOption = None,
) -> None:
    """Check STACK's gang feasibility statically: exit 0 feasible, 1 with every violation, 2 bad input."""
    env = load(stack, root).environment
    # Warnings go to stderr in both forms, so `--json`'s stdout stays the list of violations alone.
    for warning in warnings(env):
        err_console.print(f"warning: {escape(warning.line())}", highlight=False)
    if as_json:
        found = violations(env)
        sys.stdout.write(json.dumps([asdict(v) for v in found], indent=2) + "\n")
        raise typer.Exit(CHECK_FAILED if found else 0)
    refuse_if_infeasible(stack, env)
    gang = env.gang
    console.print(
        f"{stack}: feasible — gang of {gang.nodes} × {gang.gpus_per_node} GPUs ({gang.world_size}) "
        f"on pool {gang.pool.name}",
        highlight=False,
    )


def refuse_if_infeasible(stack: str, env: Environment) -> None:
    """Print the violation table and exit 1 when any rule is broken."""
    found = violations(env)
    if found:
        err_console.print(violation_table(stack, found))
        raise typer.Exit(CHECK_FAILED)


def violation_table(stack: str, found: list[Violation]) -> Table:
    table = Table(title=f"{stack}: {len(found)} violation{'s' if len(found) != 1 else ''}", show_lines=True)
    for column in ("rule", "where", "what", "by"):
        table.add_column(column, overflow="fold")
    for v in found:
        table.add_row(*(escape(cell) for cell in (v.rule, v.where, v.message, v.by)))
    return table
