"""Drive the real Pulumi engine on a stack through the Automation API's inline program.

The Pulumi CLI needs a language host to run a Python program from `Pulumi.yaml`; the Python host
is a Go module the module proxy does not serve (docs/local-kubernetes.md). The Automation API needs
none: the Python SDK serves the program itself and hands the CLI its address (`--client`). The
program is the project's own (`components.program.deploy`), the stack's config is its stack file's,
and state lives in a local backend (`file://`): nothing here talks to a Pulumi service.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

# Pulumi's Automation API is imported where the engine runs, not with this module: the CLI (and with it
# the fabric gate, `python3 -m grpo_infra.cli nccl verdict`) must import in the job's image, which holds
# this project without its dependencies (docs/images.md).
if TYPE_CHECKING:
    from pulumi import automation as auto

from .spec import PROJECT
from .spec.load import stack_path

# Offline: no update check, no plugin downloads (the provider binary on PATH is used as is).
OFFLINE_ENV = {
    "PULUMI_SKIP_UPDATE_CHECK": "true",
    "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
    "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
}


class EngineError(Exception):
    """The engine cannot run or the operation failed; the message is what to show."""


@dataclass(frozen=True)
class Settings:
    """Where the CLI and provider are, where state goes, and what cluster they act on."""

    pulumi: Path
    provider_dir: Path
    backend_url: str
    pulumi_home: Path
    work_dir: Path
    kubeconfig: Path | None = None
    # The cluster already runs KubeRay and Kueue (the local cluster): skip their charts.
    operators_installed: bool = False

    def env(self) -> dict[str, str]:
        env = {
            **OFFLINE_ENV,
            "PATH": f"{self.provider_dir}:{self.pulumi.parent}:{os.environ.get('PATH', '')}",
            "PULUMI_BACKEND_URL": self.backend_url,
        }
        passphrase = os.environ.get("PULUMI_CONFIG_PASSPHRASE")
        if passphrase is None and "PULUMI_CONFIG_PASSPHRASE_FILE" not in os.environ:
            raise EngineError("set PULUMI_CONFIG_PASSPHRASE (the passphrase that encrypts this backend's secrets)")
        if passphrase is not None:
            env["PULUMI_CONFIG_PASSPHRASE"] = passphrase
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env


def stack_config(stack: str, root: Path, operators_installed: bool) -> dict[str, Any]:
    """The stack file's `config:` block, as the stack's settings in the engine's work dir."""
    path = stack_path(stack, root)
    if not path.is_file():
        raise EngineError(f"no stack file {path}")
    config = dict((yaml.safe_load(path.read_text()) or {}).get("config") or {})
    if operators_installed:
        config[f"{PROJECT}:operatorsInstalled"] = "true"
    return config


def _program() -> None:
    from components.program import deploy

    deploy()


def select(stack: str, root: Path, settings: Settings, program: Callable[[], None] | None = None) -> auto.Stack:
    """The stack in a work dir of its own (the project's stack files are never written to). `program`:
    the project's (`components.program.deploy`) unless a caller wraps it (a rehearsal scales its objects)."""
    from pulumi import automation as auto

    settings.work_dir.mkdir(parents=True, exist_ok=True)
    settings.pulumi_home.mkdir(parents=True, exist_ok=True)
    if settings.backend_url.startswith("file://"):
        Path(settings.backend_url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(settings.work_dir),
        pulumi_home=str(settings.pulumi_home),
        env_vars=settings.env(),
        secrets_provider="passphrase",
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=settings.backend_url)
        ),
        stack_settings={
            stack: auto.StackSettings(
                secrets_provider="passphrase", config=stack_config(stack, root, settings.operators_installed)
            )
        },
        pulumi_command=auto.PulumiCommand(root=str(settings.pulumi.parent.parent), skip_version_check=True),
    )
    try:
        return auto.create_or_select_stack(
            stack_name=stack, project_name=PROJECT, program=program or _program, opts=opts
        )
    except auto.CommandError as exc:
        raise EngineError(one_line(exc)) from None


def one_line(exc: auto.CommandError) -> str:
    """The engine's own error (the program's RunError message, or the CLI's), without its banner."""
    text = str(exc)
    for marker in ("error: ", "Exception: "):
        if marker in text:
            tail = text.rsplit(marker, 1)[1]
            return " ".join(tail.strip().split("\n")[:6]).strip()
    return " ".join(text.split())[:500]


Output = Callable[[str], None]


def preview(stack: auto.Stack, on_output: Output | None = None) -> auto.PreviewResult:
    from pulumi import automation as auto

    try:
        return stack.preview(diff=True, on_output=on_output, color="never")
    except auto.CommandError as exc:
        raise EngineError(one_line(exc)) from None


def up(stack: auto.Stack, on_output: Output | None = None) -> auto.UpResult:
    from pulumi import automation as auto

    try:
        return stack.up(on_output=on_output, color="never")
    except auto.CommandError as exc:
        raise EngineError(one_line(exc)) from None


def destroy(stack: auto.Stack, on_output: Output | None = None) -> auto.DestroyResult:
    from pulumi import automation as auto

    try:
        return stack.destroy(on_output=on_output, color="never")
    except auto.CommandError as exc:
        raise EngineError(one_line(exc)) from None


def which_pulumi() -> Path | None:
    found = shutil.which("pulumi")
    return Path(found) if found else None
