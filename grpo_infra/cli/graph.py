"""`grpo-infra graph`: what `pulumi up` would register for a stack, without a cloud account."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from .common import RootOption, console, fail, load, project_root

if TYPE_CHECKING:
    from ..pulumi_graph import Graph


def graph(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the graph as JSON (secrets masked).")] = False,
    root: RootOption = None,
) -> None:
    """Show the resources STACK's Pulumi program registers: type, name, parent, dependencies, inputs."""
    from ..pulumi_graph import GraphError, record  # imports the Pulumi SDK: only for this command

    load(stack, root)  # bad input exits 2 with the message `synth` prints
    try:
        recorded = record(stack, project_root(root))
    except GraphError as exc:
        fail(escape(str(exc)))
    if as_json:
        typer.echo(recorded.dumps())
        return
    show(recorded)


def show(recorded: Graph) -> None:
    """A tree of components and their resources, then a table of every dependency edge."""
    from ..pulumi_graph import walk

    names = {r.urn: f"{r.type.rsplit(':', 1)[-1]}/{r.name}" for r in recorded.resources}
    tree = Tree(f"[bold]{recorded.stack}[/]")
    branches: dict[int, Tree] = {-1: tree}
    for depth, resource in walk(recorded):
        label = f"[cyan]{escape(resource.type)}[/] [bold]{escape(resource.name)}[/]"
        summary = summarize(resource.inputs)
        if summary:
            label += f"\n[dim]{escape(summary)}[/]"
        branches[depth] = branches[depth - 1].add(label)
    console.print(tree)

    edges = Table(title="dependencies (waits for)")
    edges.add_column("resource")
    edges.add_column("depends on")
    for resource in sorted(recorded.resources, key=lambda r: names[r.urn]):
        direct = sorted({names.get(u, u) for u in resource.dependencies})
        if direct:
            edges.add_row(names[resource.urn], ", ".join(direct))
    console.print(edges)
    if recorded.outputs:
        console.print("[bold]stack outputs[/] " + escape(json.dumps(recorded.outputs, sort_keys=True, default=str)))


def summarize(inputs: dict[str, Any], width: int = 160) -> str:
    """The inputs on one line, nested values flattened to `a.b=value`, cut at `width` characters."""
    parts: list[str] = []

    def flatten(value: Any, path: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in sorted(value.items()):
                flatten(v, f"{path}.{k}" if path else str(k))
        elif isinstance(value, list) and value and all(isinstance(v, (str, int, float, bool)) for v in value):
            parts.append(f"{path}=[{', '.join(str(v) for v in value)}]")
        elif isinstance(value, list) and value:
            parts.append(f"{path}=[{len(value)} items]")
        elif value not in (None, {}, []):
            parts.append(f"{path}={value}")

    flatten({k: v for k, v in inputs.items() if k not in ("apiVersion", "kind", "compat")}, "")
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 1] + "…"
