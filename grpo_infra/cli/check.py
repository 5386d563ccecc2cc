"""`grpo-infra check`: would this stack's gang ever be admitted, and would verl accept it?"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..check import Violation, Waived, cautions, findings, unwaived, waived
from ..check.launcher_rules import shared_host_violations
from ..spec import Environment, SpecError, list_stacks, load_stack
from .common import CHECK_FAILED, RootOption, console, err_console, fail, load, project_root

# `severity` of an entry of `check --json`: a violation fails the check, a warning never does, and neither
# does a violation or warning the stack waives (`checks.waive`; the entry also has the stack's `reason`).
ERROR, WARNING, WAIVED = "error", "warning", "waived"


def check(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.")],
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print violations and warnings as one JSON list, each with its `severity`."),
    ] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="Print how each node's size becomes the worker's request.")
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            help="Also compare the worker with the real Nodes' allocatable of this cluster.",
            show_default=False,
        ),
    ] = None,
    root: RootOption = None,
) -> None:
    """Check STACK's gang feasibility statically: exit 0 feasible, 1 with every violation, 2 bad input."""
    env = load(stack, root).environment
    nodes = _cluster_nodes(env, kubeconfig)
    if explain:
        _explain(env, nodes, err_console if as_json else console)
    judged = _violations(env, nodes) + shared_host_violations(env, other_stacks(stack, root))
    found, noted = unwaived(env, judged), unwaived(env, cautions(env))
    excused = waived(env, judged + cautions(env))
    # Warnings also go to stderr as one line each, in both forms; only violations fail the check.
    for warning in noted:
        err_console.print(f"warning: {escape(warning.line())}", highlight=False)
    if as_json:
        report = [{**asdict(v), "severity": ERROR} for v in found]
        report += [{**asdict(w), "severity": WARNING} for w in noted]
        report += [{**asdict(w.violation), "severity": WAIVED, "reason": w.reason} for w in excused]
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        raise typer.Exit(CHECK_FAILED if found else 0)
    if found:
        print_waived(excused, err_console)
        err_console.print(violation_table(stack, found))
        raise typer.Exit(CHECK_FAILED)
    gang = env.gang
    waivers = f" ({len(excused)} waived)" if excused else ""
    shape = f"gang of {gang.nodes} × {gang.gpus_per_node} GPUs ({gang.world_size}) on pool {gang.pool.name}"
    roles = env.role_gangs()
    if roles:
        shape = "disaggregated gang: " + ", ".join(
            f"{r.role} {r.nodes} × {r.gpus_per_node} GPUs on pool {r.pool.name}" for r in roles
        )
    console.print(f"{stack}: feasible{waivers} — {shape}", highlight=False)
    print_waived(excused, console)


def print_waived(excused: list[Waived], out: Console) -> None:
    """One line per waived violation or warning: what it is, where, and the stack's reason for waiving it."""
    for w in excused:
        out.print(escape(w.line()), highlight=False)


def _cluster_nodes(env: Environment, kubeconfig: Path | None) -> list[dict[str, Any]] | None:
    """The real Nodes when a kubeconfig is given (Kubernetes stacks only); None otherwise."""
    if kubeconfig is None or env.target != "kubernetes" or not str(kubeconfig):
        return None
    from ..check.live_nodes import ClusterUnreadable, read_nodes

    try:
        return read_nodes(Path(str(kubeconfig).split(":")[0]), _kubectl())
    except (ClusterUnreadable, OSError, ValueError) as exc:
        fail(escape(str(exc)))


def _violations(env: Environment, nodes: list[dict[str, Any]] | None) -> list[Violation]:
    """Every rule broken, waived or not: against the stack, and against the real Nodes when given."""
    found = findings(env)
    if nodes is not None:
        from ..check.live_nodes import live_violations

        found += live_violations(env, nodes)
    return found


def _explain(env: Environment, nodes: list[dict[str, Any]] | None, out: Console) -> None:
    """The per-pool arithmetic of the worker's request (on stderr with `--json`, whose stdout is the list)."""
    if env.target != "kubernetes":
        return
    from ..check.live_nodes import live_arithmetic
    from ..k8s.placement import share_arithmetic

    for pool in env.pools:
        for line in share_arithmetic(env, pool):
            out.print(escape(line), highlight=False)
    if nodes is not None:
        for line in live_arithmetic(env, nodes):
            out.print(escape(line), highlight=False)


def refuse_if_infeasible(stack: str, env: Environment, nodes: list[dict[str, Any]] | None = None) -> None:
    """Print the violation table and exit 1 when any rule the stack does not waive is broken."""
    found = unwaived(env, _violations(env, nodes))
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


def other_stacks(stack: str, root: Path | None) -> dict[str, Environment]:
    """The project's other stacks that load: their jobs may share this stack's hosts. A stack that does not
    load is its own `check`'s business, not this one's."""
    project = project_root(root)
    out = {}
    for name in list_stacks(project):
        if name == stack:
            continue
        try:
            out[name] = load_stack(name, project).environment
        except SpecError:
            continue
    return out


def _kubectl() -> str:
    """kubectl on PATH, else the one `scripts/build-kube.sh` built for the local cluster."""
    import shutil

    from ..check.live_nodes import ClusterUnreadable
    from ..kube.plan import TOOLS

    found = shutil.which("kubectl")
    if found:
        return found
    if Path(TOOLS["kubectl"].path).is_file():
        return str(TOOLS["kubectl"].path)
    raise ClusterUnreadable("no kubectl on PATH (nor the local cluster's, scripts/build-kube.sh) to read the Nodes")
