"""`grpo-infra rehearse STACK`: the stack's own objects on local real nodes shaped like its pools."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from ..kube.plan import KubeError
from ..rehearsal.plan import Rehearsal
from .common import RootOption, console, fail, load, project_root, wide_console


def rehearse(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.", show_default=False)],
    plan: Annotated[
        bool, typer.Option("--plan", help="Print what would be shrunk, substituted and scaled; run nothing.")
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the stack and the local cluster up after the run.")
    ] = False,
    root: RootOption = None,
) -> None:
    """Run STACK's own objects on local real nodes shaped like its pools, shrunk to fit; fail where the cloud would."""
    from ..engine import EngineError
    from ..image.build import BuildError
    from ..image.oci import OCIError
    from ..job_wait import WaitError
    from ..rehearsal.plan import rehearsal
    from ..rehearsal.reach import ReachError
    from ..rehearsal.scale import factors, local_allocatable
    from ..rehearsal.slurm_plan import slurm_rehearsal
    from ..rehearsal.tenant import TenantError

    env = load(stack, root).environment
    try:
        planned = slurm_rehearsal(stack, env) if env.target == "slurm" else rehearsal(stack, env)
        by = factors(planned.env, local_allocatable()) if env.target == "kubernetes" else {}
    except ValueError as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"))
    console.print(f"rehearsal of {stack}: what runs in place of the stack's own", highlight=False)
    for sub in planned.substitutions:
        console.print(f"  {sub.line()}", highlight=False)
    if env.target == "slurm":
        if not plan:
            _rehearse_slurm(planned, keep)
        return
    console.print("scale (every CPU and memory quantity of a pool's pods and quota):", highlight=False)
    for factor in by.values():
        console.print(f"  {factor.line()}", highlight=False)
    if plan:
        return
    from ..rehearsal.run import run

    try:
        outcome = run(planned, by, project_root(root), lambda line: console.print(line, highlight=False), keep=keep)
    except (KubeError, EngineError, BuildError, OCIError, WaitError, TenantError, ReachError) as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"), code=1)
    from .. import probe_report

    title = f"rehearsal of {stack}: rayjob {planned.env.job.tenant}/{planned.env.job.name} {outcome.status}"
    if probe_report.events(outcome.log):
        wide_console.print(probe_report.placement_table(title, outcome.log, "pod", outcome.hosts))
    if not outcome.succeeded:
        tail = "\n".join(outcome.log.rstrip().splitlines()[-20:])
        fail(f"{title}\n{tail}", code=1)
    console.print(title, highlight=False)


def _rehearse_slurm(planned: Rehearsal, keep: bool) -> None:
    """The Slurm stack's job on the local sandbox (grpo_infra/rehearsal/slurm_run.py), its placement, its outcome."""
    from .. import probe_report
    from ..rehearsal.slurm_run import run
    from ..sandbox.plan import SandboxError

    stack = planned.stack
    try:
        outcome = run(planned, lambda line: console.print(line, highlight=False), keep=keep)
    except SandboxError as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"), code=1)
    title = f"rehearsal of {stack}: job {outcome.job_id} {outcome.state}"
    if probe_report.events(outcome.log):
        wide_console.print(probe_report.placement_table(title, outcome.log, "Slurm node"))
    if not outcome.succeeded:
        tail = "\n".join(outcome.log.rstrip().splitlines()[-20:])
        fail(escape(f"{title}\n{tail}"), code=1)
    console.print(title, highlight=False)
