"""The GRPO RayJob: the Ray cluster of `raycluster.ray_cluster_spec`, verl as entrypoint, torn down after.

Kueue admits it as one gang (head, workers and submitter together) by flipping `suspend`. A RayCronJob's
template is this same spec (`raycronjob.py`).
"""

from __future__ import annotations

import shlex
from typing import Any

from .. import debug, training
from ..image import image_reference
from ..lifecycle.resume import guarded
from ..preflight.gate import gate_command
from ..spec import Environment
from .gate import PYTHONPATH_PREFIX
from .labels import JOB_LABEL, MANAGED_BY, head_pod_labels
from .node_loss import submitter_liveness
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
from .shipped import IDENTITY_KEY, RESUME_FILE, RESUME_MOUNT, resume_enabled

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
    """The job's driver command, the one place it is built: `sh -c '<gate> && <world size> && <verl>'` — the
    fabric gate (unless off), the world-size guard (with `resume: auto`), verl; with
    `job.debug.rayDebugger: postMortem`, a debugpy check first. verl's command alone when none applies.

    `gate=False` for a job sent to a running RayCluster (`grpo-infra submit`), whose gate ran once when
    the cluster came up. KubeRay's submitter pastes the entrypoint into its own bash line (`ray job submit
    ... -- <entrypoint>`) and Ray re-quotes the arguments (`shlex.join`) before the head runs them with a
    shell; so the `&&`, the assignment and the expansion are wrapped in `sh -c '<script>'`.
    """
    fabric = gate_command(env) if gate else None
    guard = debug.debugpy_guard(env)
    world = world_size_guard(env)
    if fabric is None and guard is None and world is None:
        return training.shell_command(env)
    steps = [guard] if guard else []
    steps += [f"{PYTHONPATH_PREFIX} {fabric}"] if fabric else []
    steps += [world] if world else []
    script = " && ".join([*steps, resume_guard(env, training.shell_command(env), submitted=not gate)])
    return shlex.join(["sh", "-c", script])


def resume_guard(env: Environment, command: str, submitted: bool = False) -> str:
    """verl's command under the resume rule (`grpo_infra.lifecycle.resume`), with `resume: auto`.

    A retried RayJob or a resubmitted job that resumed at step N and exited 0 without saving a newer step
    trained nothing; the guard turns its exit 0 into 1, so KubeRay reports the job FAILED, not SUCCEEDED.
    Before verl starts, a checkpoint directory written by another experiment (a reused job name) is refused
    in one line. It reads `job.checkpoint.dir`, the mount path of the job's own subPath
    (`raycluster.checkpoint_sub_path`): the directory verl writes as `trainer.default_local_dir`. The program
    comes from the head's `grpo-infra-resume` ConfigMap (`shipped.resume_files`), so the rule runs in every
    image, whatever it holds, with the image's own `python3` (standard library only).

    The RayJob's identity is the ConfigMap's `experiment.json`, rendered with it. A job `submitted` to a
    running RayCluster (`grpo-infra submit`) carries its own inline: the cluster's ConfigMap holds the
    experiment the cluster was created for, which need not be the one submitted now.
    """
    if not resume_enabled(env):
        return command
    program = f"{RESUME_MOUNT}/{RESUME_FILE}"
    if submitted:
        return guarded(env.job.checkpoint.dir, command, identity=training.identity_json(env), program=program)
    return guarded(env.job.checkpoint.dir, command, identity_file=f"{RESUME_MOUNT}/{IDENTITY_KEY}", program=program)


WORLD_SIZE_FILE = ".grpo-infra-world-size"


def world_size_guard(env: Environment) -> str | None:
    """A shell step refusing to resume checkpoints written by a gang of another size (None without resume).

    verl 0.9.1 cannot load FSDP shards saved by another world size (volcengine/verl#2265): a retry or
    requeue of the job on fewer (or more) GPUs would fail at load after the whole gang started, or worse.
    The job's checkpoint directory (its own, `raycluster.checkpoint_sub_path`) records the gang's
    `<nodes>x<GPUs per node>` on first use; a later attempt of another size stops here with one line.
    """
    if not resume_enabled(env):
        return None
    gang = env.gang
    directory = shlex.quote(env.job.checkpoint.dir)
    record = shlex.quote(f"{env.job.checkpoint.dir.rstrip('/')}/{WORLD_SIZE_FILE}")
    size = f"{gang.nodes}x{gang.gpus_per_node}"
    # The directory is a word of its own between the double-quoted parts: a `$(...)`, `"` or backquote in the
    # stack's path is printed, never run, and cannot end the quotes around the rest of the line.
    refusal = (
        f'"refused: the checkpoints in "{directory}" were written by a gang of $found '
        f'(nodes x GPUs), this attempt is {size}; verl cannot resume with another world size (verl#2265)"'
    )
    # One `{ ...; }` group: joined to the other steps by `&&`, its `;`s cannot let a later step run after it failed.
    return (
        f'{{ if [ -f {record} ]; then found=$(cat {record}); if [ "$found" != {size} ]; then echo {refusal} >&2; '
        f"exit 1; fi; fi; mkdir -p {directory}; echo {size} > {record}; }}"
    )


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
    # The submitter's own Job gives up at its first failure (KubeRay's default is 2 more, rayjob_controller.go:718):
    # when the head is lost its `ray job submit` fails, and the attempt ends as a retryable failure that starts
    # a whole new gang from the checkpoint, instead of resubmitting verl to a headless or half-rejoined cluster
    # (docs/kubernetes.md, "When the head is lost").
    spec["submitterConfig"] = {"backoffLimit": 0}
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
            "affinity": _apart_from_the_head(env),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": image_reference(env),
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
                    "livenessProbe": submitter_liveness(env),
                }
            ],
        },
    }


def _apart_from_the_head(env: Environment) -> dict[str, Any]:
    """The submitter on another node than its head where the head pool has one: a submitter that dies
    with the head's node cannot fail, and the attempt would stay Running (`submitter_liveness`).
    Preferred, not required: a one-node head pool still takes both."""
    head = {"matchLabels": head_pod_labels(env)}
    term = {"labelSelector": head, "topologyKey": "kubernetes.io/hostname"}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }
