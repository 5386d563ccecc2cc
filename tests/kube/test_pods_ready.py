"""waitForPodsReady on the local cluster (real Kueue and KubeRay, KWOK kubelets): a gang whose workers
never become Ready (an image that never pulls, a device plugin that never reports) is evicted whole once
the stack's `podsReadyTimeoutMinutes` passes, requeued, and holds no GPU while it waits.

The workers are labelled never-ready, so KWOK keeps them Running but not Ready: the RayCluster never
reaches `ready`, which is what Kueue's RayJob integration calls "pods ready" (sigs.k8s.io/kueue v0.19.2
pkg/controller/jobs/rayjob/rayjob_controller.go, PodsReady).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from grpo_infra.k8s.queues import cluster_queue_name
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import NEVER_READY_LABEL, Paths
from grpo_infra.spec import Environment

from .conftest import LocalClusters, get, local_k8s, stack_objects, wait_until
from .test_cluster import delete_stack

pytestmark = pytest.mark.cluster

# The spec allows 5 minutes at least (an image pull takes that); the test gives Kueue one, set past the
# spec's validation, so the eviction comes in a minute.
TIMEOUT_MINUTES = 1
GPU = "nvidia.com/gpu"


def impatient() -> Environment:
    env = local_k8s()
    assert env.kubernetes is not None
    kubernetes = env.kubernetes.model_copy(update={"pods_ready_timeout_minutes": TIMEOUT_MINUTES})
    return env.model_copy(update={"kubernetes": kubernetes})


@pytest.fixture(scope="module")
def stuck(local_clusters: LocalClusters) -> tuple[Paths, Environment]:
    """A local cluster whose Kueue runs the stack's waitForPodsReady with a one-minute timeout."""
    env = impatient()
    return local_clusters.use(env), env


def never_ready_workers(env: Environment) -> list[dict[str, Any]]:
    objects = stack_objects(env)
    job = next(o for o in objects if o["kind"] == "RayJob")
    for group in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        group["template"].setdefault("metadata", {}).setdefault("labels", {})[NEVER_READY_LABEL] = "true"
    return objects


def gpu_pods(paths: Paths, env: Environment) -> list[dict[str, Any]]:
    return [
        p
        for p in get(paths, "pods", "-n", env.job.tenant)["items"]
        if any(GPU in c["resources"].get("requests", {}) for c in p["spec"]["containers"])
    ]


def conditions(paths: Paths, env: Environment) -> dict[str, dict[str, Any]]:
    items = get(paths, "workloads", "-n", env.job.tenant)["items"]
    return {c["type"]: c for c in items[0].get("status", {}).get("conditions", [])} if items else {}


def gpus_reserved(paths: Paths, env: Environment) -> float:
    """What the tenant's ClusterQueue has reserved of the GPU resource, over all flavors."""
    status = get(paths, "clusterqueue", cluster_queue_name(env.tenants[0])).get("status", {})
    return sum(
        float(r["total"])
        for f in status.get("flavorsReservation", [])
        for r in f.get("resources", [])
        if r["name"] == GPU
    )


def test_a_gang_that_never_becomes_ready_is_evicted_whole_and_requeued_holding_no_gpu(
    stuck: tuple[Paths, Environment],
) -> None:
    paths, env = stuck
    objects = never_ready_workers(env)
    cluster.apply(paths, objects)
    try:
        admitted_at = time.monotonic()
        wait_until(lambda: len([p for p in gpu_pods(paths, env) if p["spec"].get("nodeName")]) == 3, 90, "3 workers")
        wait_until(lambda: gpus_reserved(paths, env) == 24, 30, "the gang's 24 GPUs reserved in its ClusterQueue")
        assert "PodsReady" not in conditions(paths, env) or conditions(paths, env)["PodsReady"]["status"] == "False"

        evicted = wait_until(
            lambda: (c := conditions(paths, env).get("Evicted")) and c["status"] == "True" and c,
            TIMEOUT_MINUTES * 60 + 90,
            "evicted by waitForPodsReady",
        )
        took = time.monotonic() - admitted_at
        print(f"evicted {took:.0f}s after admission (timeout {TIMEOUT_MINUTES} min)")
        assert evicted["reason"] == "PodsReadyTimeout", evicted
        assert took >= TIMEOUT_MINUTES * 60 - 5  # not before the stack's timeout
        # Whole: the RayJob suspended again, every GPU pod gone, the quota given back.
        wait_until(
            lambda: get(paths, "rayjob", env.job.name, "-n", env.job.tenant)["spec"].get("suspend") is True,
            60,
            "suspended",
        )
        wait_until(lambda: gpu_pods(paths, env) == [], 90, "no GPU pod left")
        wait_until(lambda: gpus_reserved(paths, env) == 0, 60, "no GPU reserved")
        # Requeued: counted in the Workload's requeue state (backoff before the next admission).
        workload = get(paths, "workloads", "-n", env.job.tenant)["items"][0]
        assert workload["status"].get("requeueState", {}).get("count") == 1, workload["status"]
    finally:
        delete_stack(paths, objects)
