"""The fabric gate inside the RayJob: the gate's code shipped as a ConfigMap, and the entrypoint that runs it.

The verl image does not contain this project, so the files of `grpo_infra.preflight` (stdlib only)
travel with the stack: a ConfigMap mounted read-only on the head pod, put on `PYTHONPATH` for the gate
alone. The rank actors are shipped to the workers by value, so the workers need torch, not these files.

The entrypoint runs the gate, then verl, joined by `&&`: a failing verdict ends the Ray job before any
training step. KubeRay's submitter pastes `spec.entrypoint` into its own bash line (`ray job submit
... -- <entrypoint>`), and Ray re-quotes the arguments it gets (`shlex.join`) before the head runs them
with a shell; so the `&&`, the assignment and the expansion are wrapped in `sh -c '<script>'` to be
interpreted on the head, not in the submitter pod.
"""

from __future__ import annotations

import shlex
from importlib import resources
from typing import Any

from .. import debug, verl
from ..preflight.gate import gate_command
from ..spec import Environment
from .labels import JOB_LABEL, MANAGED_BY

GATE_MOUNT = "/opt/grpo-infra"
GATE_VOLUME = "grpo-infra-gate"
PACKAGE = "grpo_infra.preflight"
# The shell prefix that puts the shipped package first on the gate's import path (POSIX sh).
PYTHONPATH_PREFIX = f"PYTHONPATH={GATE_MOUNT}${{PYTHONPATH:+:$PYTHONPATH}}"
# A ConfigMap (like any object) must stay under etcd's 1 MiB request limit.
CONFIG_MAP_LIMIT_BYTES = 1024 * 1024


def gate_files() -> dict[str, str]:
    """Path under the mount → text: the `grpo_infra.preflight` package's modules and an empty
    `grpo_infra/__init__.py`, read from the installed package, in sorted order."""
    package = resources.files(PACKAGE)
    files = {"grpo_infra/__init__.py": ""}
    for entry in sorted(package.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith(".py"):
            files[f"{PACKAGE.replace('.', '/')}/{entry.name}"] = entry.read_text(encoding="utf-8")
    return dict(sorted(files.items()))


def config_map_key(path: str) -> str:
    """ConfigMap keys cannot hold `/`: `grpo_infra/preflight/gate.py` → `grpo_infra.preflight.gate.py`."""
    return path.replace("/", ".")


def gate_enabled(env: Environment) -> bool:
    return env.job.preflight.nccl.enabled


def gate_config_map_name(env: Environment) -> str:
    return f"{env.job.name}-gate"


def gate_config_map(env: Environment) -> dict[str, Any] | None:
    """The ConfigMap holding the gate's code in the job's namespace, or None when the gate is off."""
    if not gate_enabled(env):
        return None
    job = env.job
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": gate_config_map_name(env),
            "namespace": job.tenant,
            "labels": {**MANAGED_BY, JOB_LABEL: job.name},
        },
        "data": {config_map_key(path): text for path, text in gate_files().items()},
    }


def gate_volume(env: Environment) -> dict[str, Any]:
    """The configMap volume laying the flat keys out as the package tree (`items[].path`), read-only."""
    return {
        "name": GATE_VOLUME,
        "configMap": {
            "name": gate_config_map_name(env),
            "items": [{"key": config_map_key(path), "path": path} for path in gate_files()],
            "defaultMode": 0o444,
        },
    }


def gate_mount() -> dict[str, Any]:
    return {"name": GATE_VOLUME, "mountPath": GATE_MOUNT, "readOnly": True}


def entrypoint(env: Environment) -> str:
    """The RayJob's entrypoint: `sh -c '<gate> && <verl>'` with the gate on, verl's command alone without;
    with `job.debug.rayDebugger: postMortem`, a debugpy check first."""
    gate = gate_command(env)
    guard = debug.debugpy_guard(env)
    if gate is None and guard is None:
        return verl.shell_command(env)
    steps = [guard] if guard else []
    steps += [f"{PYTHONPATH_PREFIX} {gate}"] if gate else []
    script = " && ".join([*steps, verl.shell_command(env)])
    return shlex.join(["sh", "-c", script])
