"""Which Ray object the stack applies (`job.kind`), and each one seen as the gang Kueue admits.

The rules that judge a gang (KubeRay's and Kueue's webhooks, Kueue's quota and flavors, pod fit, Pod
Security) read a RayJob's shape: `spec.rayClusterSpec`, and the submitter in K8sJobMode. `gang_view`
gives every kind that shape — the RayJob itself, a RayCronJob's next run (its `jobTemplate`, under the
name KubeRay gives it, in the `default` LocalQueue Kueue puts it in), a RayCluster with no submitter —
so each rule exists once for all three.
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from .raycluster import QUEUE_LABEL, ray_cluster
from .raycronjob import DEFAULT_LOCAL_QUEUE, ray_cron_job
from .rayjob import ray_job

RAY_KINDS = frozenset({"RayJob", "RayCluster", "RayCronJob"})
# KubeRay names a RayCronJob's run `<name>-<minutes since the epoch>` (raycronjob_controller.go
# `getRayJobName`); it reserves 11 characters for the suffix (utils/constant.go `MaxRayCronJobNameLength`).
CRON_RUN_SUFFIX = "-" + "9" * 10


def workload(env: Environment) -> dict[str, Any]:
    """The stack's Ray object, by `job.kind`."""
    kind = env.job.kind
    if kind == "raycluster":
        return ray_cluster(env)
    if kind == "raycronjob":
        return ray_cron_job(env)
    return ray_job(env)


def gang_view(obj: dict[str, Any]) -> dict[str, Any]:
    """A Ray object as the RayJob-shaped gang Kueue admits (for a RayCronJob: each of its runs)."""
    kind, meta = obj["kind"], obj["metadata"]
    if kind == "RayJob":
        return obj
    if kind == "RayCronJob":
        labels = {k: v for k, v in meta.get("labels", {}).items() if k != QUEUE_LABEL}
        run = {
            "name": meta["name"] + CRON_RUN_SUFFIX,
            "namespace": meta["namespace"],
            "labels": {**labels, QUEUE_LABEL: DEFAULT_LOCAL_QUEUE},
        }
        return {"apiVersion": obj["apiVersion"], "kind": "RayJob", "metadata": run, "spec": obj["spec"]["jobTemplate"]}
    # A RayCluster: its pod sets are the head and the worker groups (Kueue v0.19.2
    # pkg/controller/jobs/raycluster/common.go `BuildPodSets`); no submitter.
    spec = {k: v for k, v in obj["spec"].items() if k != "suspend"}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": "RayJob",
        "metadata": meta,
        "spec": {"submissionMode": "InteractiveMode", "rayClusterSpec": spec, "shutdownAfterJobFinishes": True},
    }


def with_gang_views(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`objects` with each Ray object replaced by its gang view (what the admission rules read)."""
    return [gang_view(o) if o["kind"] in RAY_KINDS else o for o in objects]
