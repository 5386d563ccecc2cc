"""`grpo-infra sandbox`: a real N-node Slurm cluster on this machine, from a stack's rendered files."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from .. import sandbox
from .common import RootOption, console, fail, load

app = typer.Typer(
    help="A local Slurm cluster (slurmctld + one slurmd per network namespace) to run the rendered sbatch on.",
    no_args_is_help=True,
)

StackOption = Annotated[str, typer.Option("--stack", help="Stack whose rendered Slurm files the sandbox runs.")]
NodesOption = Annotated[int, typer.Option("--nodes", min=1, help="Number of simulated nodes.")]


@app.command()
def up(stack: StackOption = "local-slurm", nodes: NodesOption = 3, root: RootOption = None) -> None:
    """Build the sandbox (cleaning up any earlier one first) and wait until every node is idle."""
    loaded = load(stack, root)
    started = time.monotonic()
    try:
        plan = sandbox.up(stack, loaded.environment, nodes)
    except sandbox.SandboxError as exc:
        fail(str(exc))
    console.print(
        f"sandbox up in {time.monotonic() - started:.1f}s: {len(plan.nodes)} nodes {plan.node_list} "
        f"× {plan.env.gang.gpus_per_node} GPUs, controller {plan.controller.name} ({plan.controller.address})"
    )
    note = sandbox.resize_note(loaded.environment, plan)
    if note:
        console.print(f"note: {note}", highlight=False)
    console.print(f'use it with: eval "$(grpo-infra sandbox env)"; sbatch {plan.sbatch}', highlight=False)


@app.command()
def down() -> None:
    """Stop every sandbox process and remove its namespaces, links, hosts entries and files."""
    if os.geteuid() != 0:
        fail("the sandbox's namespaces and daemons belong to root: run `down` as root")
    for line in sandbox.down():
        console.print(line, highlight=False)
    console.print("sandbox down")


@app.command()
def status() -> None:
    """The sandbox's nodes as `sinfo` sees them."""
    try:
        console.print(sandbox.sinfo(), highlight=False, markup=False)
    except sandbox.SandboxError as exc:
        fail(str(exc), code=1)


@app.command()
def env() -> None:
    """Print shell exports that point sbatch/squeue/scontrol/sinfo at the sandbox (use with eval)."""
    try:
        text = sandbox.env_exports()
    except sandbox.SandboxError as exc:
        fail(str(exc), code=1)
    typer.echo(text)
