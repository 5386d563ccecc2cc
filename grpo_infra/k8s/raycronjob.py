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

One tick, one run. KubeRay v1.6.2 names each run `<name>-<5 random characters>` and creates it before it
records the tick in `status.lastScheduleTime`; the RayJob's own creation event starts another reconcile,
which may read the RayCronJob from a cache that has not seen that record yet and creates a second RayJob
for the same tick (kuberay#4849). Both are admitted in turn, so the tick trains twice. v1.7.0 names a run
`<name>-<scheduled minutes since the epoch>` (`getRayJobName`), so the second create fails with
AlreadyExists. On v1.6.2 a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes ≥ 1.36)
gives every run of this RayCronJob that same name from the tick KubeRay annotates it with, so the second
create is refused by the API server; KubeRay logs the error and its next reconcile, with a fresh cache,
finds the tick done. The names it gives are v1.7.0's, so upgrading KubeRay changes no run's name.
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from .labels import JOB_LABEL, MANAGED_BY
from .operators import KUBERAY_VERSION
from .queues import KUEUE, cluster_queue_name
from .rayjob import ray_job_spec

# Kueue v0.19.2 pkg/controller/constants/constants.go `DefaultLocalQueueName`.
DEFAULT_LOCAL_QUEUE = "default"
# KubeRay's operator flag enabling the controller (off by default at v1.6.2 and v1.7.0).
FEATURE_GATE = "RayCronJob"
# What KubeRay puts on each run (v1.6.2 controllers/ray/utils/constant.go).
CRON_NAME_LABEL = "ray.io/cronjob-name"
SCHEDULED_AT = "ray.io/cronjob-scheduled-timestamp"
# The first KubeRay that names a run by its tick itself (v1.7.0 raycronjob_controller.go `getRayJobName`).
TICK_NAMES_FROM = (1, 7, 0)
ADMISSION = "admissionregistration.k8s.io/v1"


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


def operator_names_runs_by_tick() -> bool:
    """Does the pinned KubeRay name each run by its tick itself (v1.7.0 on), so no policy is needed?"""
    return tuple(int(p) for p in KUBERAY_VERSION.split(".")) >= TICK_NAMES_FROM


def tick_name_policy(env: Environment) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding that name each run of the job's RayCronJob by its tick
    (`<name>-<scheduled minutes since the epoch>`, KubeRay v1.7.0's name), so one tick makes one run; none
    where the operator names runs so itself."""
    if operator_names_runs_by_tick():
        return []
    job = env.job
    name = f"grpo-{job.tenant}-{job.name}-tick-name"
    run_of_this_cron = (
        f"has(object.metadata.labels) && {CRON_NAME_LABEL!r} in object.metadata.labels && "
        f"object.metadata.labels[{CRON_NAME_LABEL!r}] == {job.name!r}"
    )
    scheduled = f"object.metadata.annotations[{SCHEDULED_AT!r}]"
    tick_name = f"{job.name!r} + '-' + string(int(timestamp({scheduled})) / 60)"
    policy = {
        "apiVersion": ADMISSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {**MANAGED_BY, JOB_LABEL: job.name}},
        "spec": {
            # Without the policy a tick may run twice: refuse the run rather than let it through unnamed.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": ["ray.io"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["rayjobs"]}
                ]
            },
            "matchConditions": [
                {"name": "a-run-of-this-raycronjob", "expression": run_of_this_cron},
                {
                    "name": "with-its-tick",
                    "expression": f"has(object.metadata.annotations) && {SCHEDULED_AT!r} in object.metadata.annotations",
                },
            ],
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {
                        "expression": f'[JSONPatch{{op: "replace", path: "/metadata/name", value: {tick_name}}}]'
                    },
                }
            ],
        },
    }
    binding = {
        "apiVersion": ADMISSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {**MANAGED_BY, JOB_LABEL: job.name}},
        "spec": {
            "policyName": name,
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": job.tenant}},
            },
        },
    }
    return [policy, binding]
