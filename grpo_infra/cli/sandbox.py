"""`grpo-infra sandbox`: a real N-node Slurm cluster on this machine, from a stack's rendered files."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from .. import sandbox
from .common import RootOption, console, fail, load
from .lab import KeepOnFailureOption, add_lab_verbs

app = typer.Typer(
    help="A local Slurm cluster (slurmctld + one slurmd per network namespace) to run the rendered sbatch on.",
    no_args_is_help=True,
)

StackOption = Annotated[str, typer.Option("--stack", help="Stack whose rendered Slurm files the sandbox runs.")]
NodesOption = Annotated[int, typer.Option("--nodes", min=1, help="Number of simulated nodes.")]


@app.command()
def up(
    stack: StackOption = "local-slurm",
    nodes: NodesOption = 3,
    keep_on_failure: KeepOnFailureOption = False,
    root: RootOption = None,
) -> None:
    """Build the sandbox (cleaning up any earlier one first) and wait until every node is idle."""
    loaded = load(stack, root)
    started = time.monotonic()
    try:
        plan = sandbox.up(stack, loaded.environment, nodes, keep_on_failure=keep_on_failure)
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


add_lab_verbs(app, sandbox, sandbox.SandboxError, "sandbox")  # type: ignore[arg-type]
