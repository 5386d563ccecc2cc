"""A node of a running gang is lost on the local cluster (real API server, scheduler, controller
manager, Kueue and KubeRay; KWOK kubelets).

Shown here: the PodDisruptionBudget makes the real API server refuse an eviction of a gang pod; after a
GPU node is deleted, the pod GC removes its pod and KubeRay's replacement finds no node, while the
attempt stays Running and admitted. Nothing runs Ray under KWOK, so nothing fails the Ray job, which is
what ends the attempt on a real cluster (docs/kubernetes.md, "When a node is lost"): KubeRay's retry,
Kueue's recoveryTimeout eviction and readmission, and the resumed entrypoint are not shown here.

The gang is the whole pool (4 nodes), so no spare node takes the replacement worker. The submitter
pod is labelled never-ready: it stands for a driver still following the running job (KWOK would
otherwise complete it at once).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grpo_infra.kube import cluster
from grpo_infra.kube.plan import NEVER_READY_LABEL, Paths
from grpo_infra.spec import Environment

from .conftest import (
    LocalClusters,
    get,
    local_k8s,
    stack_objects,
    unsuspended,
    wait_until,
    with_changes,
)

pytestmark = pytest.mark.cluster

LOST = "local-gpu-2"
CHECKPOINT_DIR = "/checkpoints/qwen25-05b-gsm8k"
JOB_LABEL = "grpo-infra/job"


def whole_pool_gang() -> Environment:
    def change(data: dict[str, Any]) -> None:
        # The local nodes are never replaced and their images are loaded before the job: nothing to wait for
        # before Kueue's recoveryTimeout, which this module makes as short as Kueue allows.
        data["kubernetes"]["nodeReplacementMinutes"] = 0
        data["kubernetes"]["imagePullMinutes"] = 0
        data["kubernetes"]["recoveryTimeoutMinutes"] = 1
        data["tenants"] = [{"name": "rl-team", "queue": "rl-team", "gpuQuota": 32}]
        data["job"]["nodes"] = 4

    return with_changes(local_k8s(), change)


@pytest.fixture(scope="module")
def lossy(local_clusters: LocalClusters) -> Iterator[tuple[Paths, Environment]]:
    """A cluster of this module's own (its Kueue's recoveryTimeout), taken down after it: the test leaves a
    node deleted and its gang running, which no other module could use."""
    env = whole_pool_gang()
    yield local_clusters.use(env), env
    local_clusters.close()


def stand_in_objects(env: Environment) -> list[dict[str, Any]]:
    objects = stack_objects(env)
    job = next(o for o in objects if o["kind"] == "RayJob")
    job["spec"]["submitterPodTemplate"]["metadata"]["labels"][NEVER_READY_LABEL] = "true"
    return objects


def job_pods(paths: Paths, env: Environment) -> list[dict[str, Any]]:
    return get(paths, "pods", "-n", env.job.tenant, "-l", f"{JOB_LABEL}={env.job.name}")["items"]


def gpu_pods(paths: Paths, env: Environment) -> list[dict[str, Any]]:
    return [
        p
        for p in job_pods(paths, env)
        if any("nvidia.com/gpu" in c["resources"].get("requests", {}) for c in p["spec"]["containers"])
    ]


def ray_job(paths: Paths, env: Environment) -> dict[str, Any]:
    return get(paths, "rayjob", env.job.name, "-n", env.job.tenant)


def ready_cluster(paths: Paths, env: Environment, timeout: float, other_than: str = "") -> str:
    def ready() -> str | None:
        name = ray_job(paths, env).get("status", {}).get("rayClusterName")
        if not name or name == other_than:
            return None
        rc = get(paths, "rayclusters", "-n", env.job.tenant)["items"]
        return (
            name
            if any(c["metadata"]["name"] == name and c.get("status", {}).get("state") == "ready" for c in rc)
            else None
        )

    return wait_until(ready, timeout, f"a Ready RayCluster other than {other_than!r}")


def submitter(paths: Paths, env: Environment, timeout: float, other_than: str = "") -> dict[str, Any]:
    def made() -> dict[str, Any] | None:
        pods = [
            p
            for p in job_pods(paths, env)
            if p["metadata"]["labels"].get(NEVER_READY_LABEL) and p["metadata"]["uid"] != other_than
        ]
        return pods[0] if pods else None

    return wait_until(made, timeout, "the attempt's submitter pod")


def evict(paths: Paths, pod: dict[str, Any]) -> str:
    """POST an Eviction for `pod` (what `kubectl drain` does); the API server's answer."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
    }
    proc = cluster.run_kubectl(
        paths,
        "create",
        "--raw",
        f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/eviction",
        "-f",
        "-",
        stdin=json.dumps(body),
        check=False,
    )
    return (proc.stdout + proc.stderr).strip()


def test_a_lost_node_leaves_the_budget_refusing_evictions_and_its_worker_pending(
    lossy: tuple[Paths, Environment],
) -> None:
    paths, env = lossy
    timeline: list[tuple[float, str]] = []
    start = time.monotonic()

    def mark(event: str) -> None:
        timeline.append((round(time.monotonic() - start, 1), event))

    cluster.apply(paths, stand_in_objects(env))  # strict: every other field known to the real CRDs
    first = ready_cluster(paths, env, 120)
    submitter(paths, env, 120)
    mark(f"admitted, RayCluster {first} ready on 4 nodes")
    workers = [p for p in gpu_pods(paths, env) if p["spec"].get("nodeName")]
    assert sorted(p["spec"]["nodeName"] for p in workers) == [f"local-gpu-{i}" for i in range(1, 5)]

    # Item 1 on a real API server: a drain's eviction of a gang pod is refused by the budget.
    victim = next(p for p in workers if p["spec"]["nodeName"] == LOST)
    answer = wait_until(lambda: (a := evict(paths, victim)) and "disruption budget" in a and a, 60, "budget")
    assert "Cannot evict pod as it would violate the pod's disruption budget" in answer, answer
    mark("eviction refused by the PodDisruptionBudget")

    # The node is lost: deleted from the cluster. The pod GC removes its pod and KubeRay makes a
    # replacement no node can take. KubeRay keeps the RayCluster's state Ready (it never resets it), so
    # Kueue does not notice: what ends the attempt is the driver failing (stood in for here).
    cluster.kubectl(paths, "delete", "node", LOST, "--wait=false")
    mark(f"node {LOST} deleted")
    wait_until(
        lambda: any(not p["spec"].get("nodeName") for p in gpu_pods(paths, env)), 120, "a replacement worker Pending"
    )
    mark("replacement worker Pending: no node for it")
    # Nothing runs Ray under KWOK, so nothing fails the Ray job (step 2) and KubeRay keeps the attempt:
    # the RayJob stays Running and admitted, the healthy workers keep their GPUs. On a real cluster
    # Ray's node-death detection ends it here; the rest of the sequence (KubeRay's retry, Kueue's
    # recoveryTimeout eviction and readmission, the resumed entrypoint) is not shown on this cluster.
    job = ray_job(paths, env)
    assert job["status"].get("jobDeploymentStatus") == "Running"
    assert unsuspended(job)  # still admitted
    assert job["status"].get("failed", 0) == 0
    healthy = [p for p in gpu_pods(paths, env) if p["spec"].get("nodeName")]
    assert sorted(p["spec"]["nodeName"] for p in healthy) == ["local-gpu-1", "local-gpu-3", "local-gpu-4"]
    mark("attempt still Running on 3 nodes: only Ray's failure (absent here) ends it")
    print("\n".join(f"{t:7.1f}s  {e}" for t, e in timeline))
