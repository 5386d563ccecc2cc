"""`grpo-infra rehearse STACK`: the stack's own objects on local real nodes shaped like its pools."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from ..kube.plan import KubeError
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
    from ..rehearsal.scale import factors, local_allocatable
    from ..rehearsal.tenant import TenantError

    env = load(stack, root).environment
    try:
        planned = rehearsal(stack, env)
        by = factors(planned.env, local_allocatable())
    except ValueError as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"))
    console.print(f"rehearsal of {stack}: what runs in place of the stack's own", highlight=False)
    for sub in planned.substitutions:
        console.print(f"  {sub.line()}", highlight=False)
    console.print("scale (every CPU and memory quantity of a pool's pods and quota):", highlight=False)
    for factor in by.values():
        console.print(f"  {factor.line()}", highlight=False)
    if plan:
        return
    from ..rehearsal.run import run

    try:
        outcome = run(planned, by, project_root(root), lambda line: console.print(line, highlight=False), keep=keep)
    except (KubeError, EngineError, BuildError, OCIError, WaitError, TenantError) as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"), code=1)
    from .. import probe_report

    title = f"rehearsal of {stack}: rayjob {planned.env.job.tenant}/{planned.env.job.name} {outcome.status}"
    if probe_report.events(outcome.log):
        wide_console.print(probe_report.placement_table(title, outcome.log, "pod", outcome.hosts))
    if not outcome.succeeded:
        tail = "\n".join(outcome.log.rstrip().splitlines()[-20:])
        fail(f"{title}\n{tail}", code=1)
    console.print(title, highlight=False)
