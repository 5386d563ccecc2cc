"""`job.kind: raycronjob`: KubeRay's RayCronJob, a RayJob (the stack's own, `rayjob.ray_job_spec`) per tick.

What KubeRay's RayCronJob does, read at the pinned tags (v1.7.0, and the v1.6.2 the local cluster runs):
alpha behind the operator's `RayCronJob` feature gate (ray-operator/pkg/features/features.go); the
CRD carries `schedule`, `timeZone`, `suspend` and a `jobTemplate` that is a bare RayJob spec, no
metadata and no concurrency policy (apis/ray/v1/raycronjob_types.go). Each tick creates a RayJob named
`<name>-<minutes since the epoch>` with one label of KubeRay's own (controllers/ray/raycronjob_controller.go
`constructRayJob`): not the Kueue queue label. Kueue admits such a RayJob through the namespace's
LocalQueue named `default` when one exists (Kueue v0.19.2 pkg/controller/jobframework/defaults.go
`ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector`, called by pkg/controller/jobs/rayjob/rayjob_webhook.go):
so the stack gives the job's namespace that LocalQueue, leading to the tenant's ClusterQueue, and every
run is admitted whole against the tenant's quota. A tick while a run is still going makes a second RayJob,
which Kueue keeps suspended until the quota is free (`concurrencyPolicy: Allow`, the only one possible).
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from .labels import JOB_LABEL, MANAGED_BY
from .queues import KUEUE, cluster_queue_name
from .rayjob import ray_job_spec

# Kueue v0.19.2 pkg/controller/constants/constants.go `DefaultLocalQueueName`.
DEFAULT_LOCAL_QUEUE = "default"
# KubeRay's operator flag enabling the controller (off by default at v1.6.2 and v1.7.0).
FEATURE_GATE = "RayCronJob"


def ray_cron_job(env: Environment) -> dict[str, Any]:
    """The RayCronJob object: the schedule, and the RayJob spec every run gets."""
    assert env.kubernetes is not None and env.kubernetes.ray_cron_job is not None
    settings, job = env.kubernetes.ray_cron_job, env.job
    spec: dict[str, Any] = {"schedule": settings.schedule, "jobTemplate": ray_job_spec(env)}
    if settings.time_zone is not None:
        spec["timeZone"] = settings.time_zone
    if settings.suspend:
        spec["suspend"] = True
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": job.name, "namespace": job.tenant, "labels": {**MANAGED_BY, JOB_LABEL: job.name}},
        "spec": spec,
    }


def default_local_queue(env: Environment) -> dict[str, Any] | None:
    """The LocalQueue `default` in the job's namespace, leading to its tenant's ClusterQueue, through which
    Kueue admits the RayJobs a RayCronJob makes; None when the tenant's own queue is already `default`."""
    tenant = env.tenant(env.job.tenant)
    if tenant.queue == DEFAULT_LOCAL_QUEUE:
        return None
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": DEFAULT_LOCAL_QUEUE, "namespace": tenant.name, "labels": dict(MANAGED_BY)},
        "spec": {"clusterQueue": cluster_queue_name(tenant)},
    }
