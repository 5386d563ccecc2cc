"""The GRPO RayJob: the Ray cluster of `raycluster.ray_cluster_spec`, verl as entrypoint, torn down after.

Kueue admits it as one gang (head, workers and submitter together) by flipping `suspend`. A RayCronJob's
template is this same spec (`raycronjob.py`).
"""

from __future__ import annotations

import shlex
from typing import Any

from .. import debug, verl
from ..image import image_reference
from ..preflight.gate import gate_command
from ..spec import Environment
from .gate import PYTHONPATH_PREFIX
from .labels import JOB_LABEL, MANAGED_BY
from .operators import uses_kueue
from .placement import cpu_quantity, memory_quantity
from .queues import SUBMITTER_CPU_MILLI, SUBMITTER_MEMORY_MI
from .raycluster import (
    DASHBOARD_PORT,
    DEFAULT_CHECKPOINT_CLAIM,
    PREFERRED_TOPOLOGY,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    RAY_LOG_DIR,
    checkpoint_source,
    dashboard_command,
    dashboard_token_command,
    head_placement,
    pod_metadata,
    ray_auth_options,
    ray_cluster_spec,
    scheduling_labels,
    volume_source,
    worker_group_name,
)

__all__ = [
    "DASHBOARD_PORT",
    "DEFAULT_CHECKPOINT_CLAIM",
    "PREFERRED_TOPOLOGY",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "RAY_LOG_DIR",
    "checkpoint_source",
    "dashboard_command",
    "dashboard_token_command",
    "entrypoint",
    "head_placement",
    "ray_auth_options",
    "ray_job",
    "ray_job_spec",
    "volume_source",
    "worker_group_name",
]


def entrypoint(env: Environment, gate: bool = True) -> str:
    """The job's driver command, the one place it is built: `sh -c '<gate> && <verl>'` with the gate on,
    verl's command alone without; with `job.debug.rayDebugger: postMortem`, a debugpy check first.

    `gate=False` for a job sent to a running RayCluster (`grpo-infra submit`), whose gate ran once when
    the cluster came up. KubeRay's submitter pastes the entrypoint into its own bash line (`ray job submit
    ... -- <entrypoint>`) and Ray re-quotes the arguments (`shlex.join`) before the head runs them with a
    shell; so the `&&`, the assignment and the expansion are wrapped in `sh -c '<script>'`.
    """
    fabric = gate_command(env) if gate else None
    guard = debug.debugpy_guard(env)
    if fabric is None and guard is None:
        return verl.shell_command(env)
    steps = [guard] if guard else []
    steps += [f"{PYTHONPATH_PREFIX} {fabric}"] if fabric else []
    script = " && ".join([*steps, verl.shell_command(env)])
    return shlex.join(["sh", "-c", script])


def ray_job_spec(env: Environment) -> dict[str, Any]:
    """The RayJob's `spec`: entrypoint, lifecycle and retries around the shared Ray cluster."""
    assert env.kubernetes is not None
    settings = env.kubernetes.ray_job
    spec: dict[str, Any] = {
        # The fabric gate, then verl (`grpo_infra.k8s.gate`); verl alone when the stack switched the gate off.
        "entrypoint": entrypoint(env),
        "submissionMode": "K8sJobMode",
        # Kueue unsuspends the job when the whole gang fits; Volcano gangs the pods itself.
        "suspend": uses_kueue(env),
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
    }
    if settings.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = settings.active_deadline_seconds
    spec["backoffLimit"] = settings.backoff_limit
    spec["submitterPodTemplate"] = _submitter_template(env)
    spec["rayClusterSpec"] = ray_cluster_spec(env)
    return spec


def ray_job(env: Environment) -> dict[str, Any]:
    """The RayJob object (`job.kind: rayjob`)."""
    job = env.job
    labels = {**MANAGED_BY, JOB_LABEL: job.name, **scheduling_labels(env)}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": job.name, "namespace": job.tenant, "labels": labels},
        "spec": ray_job_spec(env),
    }


def _submitter_template(env: Environment) -> dict[str, Any]:
    cpu, memory = cpu_quantity(SUBMITTER_CPU_MILLI), memory_quantity(SUBMITTER_MEMORY_MI)
    return {
        "metadata": pod_metadata(env),
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            **head_placement(env),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": image_reference(env),
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }
