"""The fabric gate inside the RayJob: the gate's code shipped as a ConfigMap, and the entrypoint that runs it.

The verl image does not contain this project, so the files of `grpo_infra.preflight` (stdlib only)
travel with the stack: a ConfigMap mounted read-only on the head pod, put on `PYTHONPATH` for the gate
alone (named and labelled as the image guard's, `grpo_infra.k8s.shipped`). The rank actors are shipped to the workers by value, so the workers need torch, not these files.

A RayJob's entrypoint (`grpo_infra.k8s.rayjob.entrypoint`) runs the gate, then verl, joined by `&&`: a
failing verdict ends the Ray job before any training step. A RayCluster has no entrypoint: the gate runs
once from a container beside its head (`gate_sidecar`).
"""

from __future__ import annotations

import shlex
from importlib import resources
from typing import Any

from ..image import image_reference
from ..preflight.gate import gate_command
from ..spec import Environment
from .labels import ray_token_secret_name
from .node_loss import DASHBOARD_PORT
from .placement import cpu_quantity, memory_quantity
from .queues import SUBMITTER_CPU_MILLI, SUBMITTER_MEMORY_MI
from .shipped import code_config_map

GATE_MOUNT = "/opt/grpo-infra"
GATE_VOLUME = "grpo-infra-gate"
PACKAGE = "grpo_infra.preflight"
# The shell prefix that puts the shipped package first on the gate's import path (POSIX sh).
PYTHONPATH_PREFIX = f"PYTHONPATH={GATE_MOUNT}${{PYTHONPATH:+:$PYTHONPATH}}"
# The container beside a RayCluster's head that runs the gate once, and the file its readiness reads.
GATE_CONTAINER = "fabric-gate"
GATE_PASSED = "/tmp/grpo-infra-gate-passed"


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
    data = {config_map_key(path): text for path, text in gate_files().items()}
    return code_config_map(env, gate_config_map_name(env), data)


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


def gate_sidecar(env: Environment) -> dict[str, Any]:
    """The container beside a RayCluster's head that runs the fabric gate once, when Ray is up.

    A RayCluster has no entrypoint, so the gate is sent to the cluster's own Jobs API on the pod's loopback
    (`ray job submit`, which exits 1 when the job fails: Ray 2.60 `dashboard/modules/job/cli.py`). The
    container is Ready only once the gate passed: until then the head pod is not Ready, KubeRay does not
    call the RayCluster `ready`, `grpo-infra submit` refuses it, and Kueue's waitForPodsReady evicts a
    cluster whose gate failed instead of leaving it to train slowly. Its verdict is its log
    (`kubectl logs <head pod> -c fabric-gate`). Sized as a RayJob's submitter, which the head flavor's
    quota already holds per head.
    """
    assert env.kubernetes is not None
    gate = gate_command(env)
    assert gate is not None
    settings = env.job.preflight.nccl
    tries = max(1, settings.timeout_seconds // 5)
    job = shlex.join(["sh", "-c", f"{PYTHONPATH_PREFIX} {gate}"])
    script = "; ".join(
        [
            f"rm -f {GATE_PASSED}",
            "n=0",
            f"until ray job list >/dev/null 2>&1; do n=$((n+1)); if [ $n -ge {tries} ]; then "
            "echo 'FAIL fabric gate: the Ray dashboard never answered; the cluster stays not Ready'; "
            "exec sleep infinity; fi; sleep 5; done",
            f"if ray job submit -- {job}; then touch {GATE_PASSED}; echo 'fabric gate passed: the cluster is Ready'; "
            "else echo 'FAIL fabric gate: see the lines above; the cluster stays not Ready'; fi",
            "exec sleep infinity",
        ]
    )
    env_vars: list[dict[str, Any]] = [{"name": "RAY_ADDRESS", "value": f"http://127.0.0.1:{DASHBOARD_PORT}"}]
    if env.kubernetes.ray_job.ray_auth == "token":
        env_vars += [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {
                "name": "RAY_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": ray_token_secret_name(env), "key": "auth_token"}},
            },
        ]
    cpu, memory = cpu_quantity(SUBMITTER_CPU_MILLI), memory_quantity(SUBMITTER_MEMORY_MI)
    return {
        "name": GATE_CONTAINER,
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "env": env_vars,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
        "readinessProbe": {"exec": {"command": ["test", "-f", GATE_PASSED]}, "periodSeconds": 5},
    }
