"""`grpo-infra up|preview|destroy STACK`: the real Pulumi engine on a stack, through the Automation
API's inline program (no Python language host needed), against the local cluster of `grpo-infra kube up`
or, with PULUMI_BACKEND_URL set, the cluster KUBECONFIG names."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .. import engine
from ..kube import cluster
from ..kube.plan import KubeError
from .common import RootOption, console, fail, load, project_root

StackArgument = Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml.", show_default=False)]


def _settings(stack: str) -> engine.Settings:
    """The local cluster when it is up and KUBECONFIG does not point elsewhere; otherwise the
    cluster and backend the environment names."""
    local = cluster.Paths(cluster.ROOT).kubeconfig
    kubeconfig = os.environ.get("KUBECONFIG")
    if local.is_file() and (kubeconfig is None or Path(kubeconfig) == local):
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


def up(stack: StackArgument, root: RootOption = None) -> None:
    """`pulumi up` of STACK: create or update everything it declares."""
    try:
        result = engine.up(_stack(stack, root), on_output=_echo)
    except engine.EngineError as exc:
        fail(str(exc), code=1)
    console.print(f"up: {result.summary.resource_changes}", highlight=False)


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
