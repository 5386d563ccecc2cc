"""`grpo-infra stacks`: what environments this project describes."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from ..spec import SpecError, list_stacks, load_stack
from .common import BAD_INPUT, RootOption, console, err_console, fail, project_root


def stacks(root: RootOption = None) -> None:
    """List the stacks in stacks/ with their target, size and gang."""
    base = project_root(root)
    if not list_stacks(base):
        fail(f"no stacks in {base / 'stacks'} (stack files are named Pulumi.<stack>.yaml)")
    table = Table(title=f"stacks in {base / 'stacks'}")
    for column in ("stack", "target", "pools", "nodes", "GPUs", "tenants", "job gang"):
        table.add_column(column, justify="right" if column in ("nodes", "GPUs") else "left")
    broken = []
    for name in list_stacks(base):
        try:
            env = load_stack(name, base).environment
        except SpecError as exc:
            broken.append(exc.render())
            table.add_row(name, "[red]invalid[/]", "", "", "", "", "")
            continue
        target = env.target if env.kubernetes is None else f"kubernetes/{env.kubernetes.provider}"
        gang = env.gang
        table.add_row(
            name,
            target,
            ", ".join(p.name for p in env.pools),
            str(sum(p.node_count for p in env.pools)),
            str(sum(p.gpu_count for p in env.pools)),
            ", ".join(t.name for t in env.tenants),
            f"{env.job.name}: {gang.nodes} × {gang.gpus_per_node} GPU",
        )
    console.print(table)
    for message in broken:
        err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)
    if broken:
        raise typer.Exit(BAD_INPUT)
