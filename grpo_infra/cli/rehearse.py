"""`grpo-infra rehearse STACK`: the stack's own objects on local real nodes shaped like its pools."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ..kube.plan import KubeError
from ..rehearsal.plan import Rehearsal
from .common import RootOption, console, fail, load, project_root, wide_console

if TYPE_CHECKING:
    from ..rehearsal.node_drills import Loss
    from ..spec import Environment


def rehearse(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.", show_default=False)],
    plan: Annotated[
        bool, typer.Option("--plan", help="Print what would be shrunk, substituted and scaled; run nothing.")
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave the stack and the local cluster up after the run.")
    ] = False,
    drill: Annotated[
        str | None,
        typer.Option(
            "--drill",
            help="Put one fault into the stack's Ray object (head-init: its head's first init container exits 1; "
            "image: its head's image tag exists nowhere) and show what it costs: the one line and how long the "
            "gang's GPUs were held before they were released; or lose a node mid-run (worker-node: a GPU node "
            "dies and boots again; head-node: the head's node dies for good) and show how long the gang's GPUs "
            "sat idle until training resumed (docs/rehearsal.md, 'Drills').",
        ),
    ] = None,
    root: RootOption = None,
) -> None:
    """Run STACK's own objects on local real nodes shaped like its pools, shrunk to fit; fail where the cloud would."""
    from ..engine import EngineError
    from ..image.build import BuildError
    from ..image.oci import OCIError
    from ..job_wait import WaitError
    from ..rehearsal import drills, node_drills
    from ..rehearsal.operators import OperatorError
    from ..rehearsal.plan import rehearsal
    from ..rehearsal.reach import ReachError
    from ..rehearsal.scale import factors, local_allocatable
    from ..rehearsal.slurm_plan import slurm_rehearsal
    from ..rehearsal.tenant import TenantError

    known = [*drills.DRILLS, *node_drills.NODE_DRILLS]
    if drill is not None and drill not in known:
        fail(f"--drill: no drill {drill!r}; drills: {', '.join(known)}")
    env = load(stack, root).environment
    if drill is not None and env.target != "kubernetes":
        fail("--drill: drills run on the Kubernetes stacks only")
    if drill in node_drills.NODE_DRILLS and env.job.kind != "rayjob":
        fail(f"--drill {drill}: a node drill follows a RayJob's retries; stack {stack} runs a {env.job.kind}")
    try:
        planned = slurm_rehearsal(stack, env) if env.target == "slurm" else rehearsal(stack, env)
        if drill in node_drills.NODE_DRILLS:
            planned = node_drills.with_long_probe(planned)
            planned = replace(planned, substitutions=(*planned.substitutions, node_drills.substitution(drill, env)))
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

    if drill is not None:
        console.print(f"drill {drill}: {({**drills.DRILLS, **node_drills.NODE_DRILLS})[drill]}", highlight=False)
    try:
        outcome, loss = run(
            planned, by, project_root(root), lambda line: console.print(line, highlight=False), keep=keep, drill=drill
        )
    except WaitError as exc:
        if drill is None or drill in node_drills.NODE_DRILLS:
            fail(escape(f"rehearsal of {stack}: {exc}"), code=1)
        _drill_verdict(stack, drill, str(exc), env)
        return
    except (KubeError, EngineError, BuildError, OCIError, TenantError, ReachError, OperatorError) as exc:
        fail(escape(f"rehearsal of {stack}: {exc}"), code=1)
    from .. import probe_report

    if loss is not None:
        _node_drill_verdict(stack, loss, outcome.job, outcome.log)
        return
    if drill is not None:
        fail(f"drill {drill} of {stack}: the run went on as if nothing was wrong; the fault went unnoticed", code=1)

    job = planned.env.job
    if job.kind == "raycluster":
        what = f"raycluster {job.tenant}/{job.name}: its submission"
    else:
        what = f"rayjob {job.tenant}/{outcome.job.get('metadata', {}).get('name', job.name)}"
    title = f"rehearsal of {stack}: {what} {outcome.status}"
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


def _drill_verdict(stack: str, drill: str, line: str, env: Environment) -> None:
    """The drill's one line, then what it cost: passed when the cause was shown and the GPUs released."""
    from ..rehearsal import drills

    console.print(escape(line), highlight=False)
    got = drills.result(line)
    if not got.passed:
        fail(f"drill {drill} of {stack}: the gang's GPUs were not released after the cause was shown", code=1)
    assert got.held_s is not None and got.released_s is not None
    console.print(
        f"drill {drill} of {stack}: cause shown {got.held_s}s after Kueue admitted the gang, its GPUs released "
        f"{got.released_s}s later: held {got.held_s + got.released_s}s in all (unwatched, Kueue would hold them "
        f"{drills.unwatched_hold(env)})",
        highlight=False,
    )


def _node_drill_verdict(stack: str, loss: Loss, job: dict[str, Any], log: str) -> None:
    """The node drill's account: passed when the job SUCCEEDED after the lost node's attempt failed and the new
    attempt resumed from the checkpoint the node died at (or later), with how long the GPUs sat idle."""
    from .. import probe_report
    from ..rehearsal import node_drills

    starts = [e for e in probe_report.events(log) if e.get("event") in ("resume", "start")]
    resumed_from = starts[0].get("from_step", 0) if starts else None
    why = node_drills.passed(loss, job, resumed_from)
    if why is not None:
        fail(escape(f"drill {loss.drill} of {stack}: {why}"), code=1)
    failed = int(job.get("status", {}).get("failed") or 0)
    console.print(
        escape(
            f"{loss.line(stack)}; SUCCEEDED after {failed} failed attempt(s), the last resumed from step {resumed_from}"
        ),
        highlight=False,
    )
