"""`grpo-infra up|preview|destroy STACK`: the real Pulumi engine on a stack, through the Automation
API's inline program (no Python language host needed), against the local cluster of `grpo-infra kube up`
or, with PULUMI_BACKEND_URL set, the cluster KUBECONFIG names."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import engine, job_wait, probe_report
from ..kube.plan import ROOT as LOCAL_CLUSTER_ROOT
from ..kube.plan import KubeError, Paths
from ..spec import Environment
from .common import RootOption, console, fail, load, project_root, wide_console

StackArgument = Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.", show_default=False)]
WaitOption = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="After `up`, follow the stack's RayJob until the run ends: its states, its final status (exit 1 "
        "unless SUCCEEDED) and, for `job.probe`, where every rank ran.",
    ),
]


def _settings(stack: str) -> engine.Settings:
    """The local cluster when it is up and KUBECONFIG does not point elsewhere; otherwise the
    cluster and backend the environment names."""
    local = Paths(LOCAL_CLUSTER_ROOT).kubeconfig
    kubeconfig = os.environ.get("KUBECONFIG")
    if local.is_file() and (kubeconfig is None or Path(kubeconfig) == local):
        # The local cluster's code needs the `kube` extra (its certificates): imported only when it is up.
        from ..kube import cluster

        try:
            return cluster.engine_settings(stack)
        except KubeError as exc:
            fail(str(exc))
    backend = os.environ.get("PULUMI_BACKEND_URL")
    pulumi, provider = engine.which_pulumi(), engine.shutil.which("pulumi-resource-kubernetes")
    if backend is None or pulumi is None or provider is None:
        fail(
            "no local cluster is up (`grpo-infra kube up`), and PULUMI_BACKEND_URL, `pulumi` and "
            "`pulumi-resource-kubernetes` on PATH are not all set for another cluster"
        )
    home = Path(os.environ.get("PULUMI_HOME", Path.home() / ".pulumi"))
    return engine.Settings(
        pulumi=pulumi,
        provider_dir=Path(provider).parent,
        backend_url=backend,
        pulumi_home=home,
        work_dir=home / "grpo-infra-work" / stack,
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
    )


def _stack(stack: str, root: Path | None) -> engine.auto.Stack:
    load(stack, root)  # bad input: the same one-line message as `check`, before the engine starts
    try:
        return engine.select(stack, project_root(root), _settings(stack))
    except engine.EngineError as exc:
        fail(str(exc))


def _echo(line: str) -> None:
    typer.echo(line.rstrip("\n"))


MountWaitOption = Annotated[
    int,
    typer.Option(
        "--mount-wait",
        min=10,
        max=3600,
        help="With --wait: seconds a scheduled pod's volume may keep failing to mount (FailedMount) before the "
        "gang is called stuck, named in one line and its GPUs released.",
    ),
]


def up(
    stack: StackArgument,
    root: RootOption = None,
    wait: WaitOption = False,
    mount_wait: MountWaitOption = job_wait.MOUNT_WAIT_S,
) -> None:
    """`pulumi up` of STACK: create or update everything it declares."""
    env = load(stack, root).environment
    if wait and env.job.kind != "rayjob":
        fail(f'--wait follows a RayJob; stack {stack} runs a {env.job.kind} (docs/kubernetes.md, "Which kind")')
    try:
        result = engine.up(_stack(stack, root), on_output=_echo)
    except engine.EngineError as exc:
        fail(str(exc), code=1)
    console.print(f"up: {result.summary.resource_changes}", highlight=False)
    if wait:
        _follow(stack, env, mount_wait)


def _kubectl(stack: str) -> job_wait.Kubectl:
    """kubectl against the cluster `up` deployed to: the local cluster's, else the one KUBECONFIG names."""
    local = Paths(LOCAL_CLUSTER_ROOT)
    kubeconfig = os.environ.get("KUBECONFIG")
    if local.kubeconfig.is_file() and (kubeconfig is None or Path(kubeconfig) == local.kubeconfig):
        from ..kube import cluster

        return functools.partial(cluster.kubectl, local)
    binary = shutil.which("kubectl")
    if binary is None:
        fail("--wait needs kubectl on PATH for a cluster other than the local one")

    def run(*args: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise job_wait.WaitError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    return run


def _follow(stack: str, env: Environment, mount_wait: float) -> None:
    """The run after `up`: its states, its end, and where the probe placed every rank."""
    try:
        outcome = job_wait.wait(
            env,
            _kubectl(stack),
            lambda line: console.print(line, highlight=False),
            release=True,
            mount_after=mount_wait,
        )
    except (job_wait.WaitError, KubeError) as exc:
        fail(escape(str(exc)), code=1)
    title = f"rayjob {env.job.tenant}/{env.job.name} {outcome.status}"
    if probe_report.events(outcome.log):
        wide_console.print(
            probe_report.placement_table(f"{title}: where every rank ran", outcome.log, "pod", outcome.hosts)
        )
    else:
        console.print(title, highlight=False)
    if not outcome.succeeded:
        message = outcome.job.get("status", {}).get("message") or ""
        tail = "\n".join(outcome.log.rstrip().splitlines()[-20:])
        fail(f"{title}{': ' + message if message else ''}\n{tail}", code=1)


def preview(stack: StackArgument, root: RootOption = None) -> None:
    """`pulumi preview --diff` of STACK: what `up` would change, property by property."""
    try:
        engine.preview(_stack(stack, root), on_output=_echo)
    except engine.EngineError as exc:
        fail(str(exc), code=1)


def destroy(stack: StackArgument, root: RootOption = None) -> None:
    """`pulumi destroy` of STACK: delete everything it made, dependents first."""
    try:
        result = engine.destroy(_stack(stack, root), on_output=_echo)
    except engine.EngineError as exc:
        fail(str(exc), code=1)
    console.print(f"destroy: {result.summary.resource_changes}", highlight=False)


COMMANDS = (up, preview, destroy)
