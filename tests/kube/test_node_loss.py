"""A node of a running gang is lost on the local cluster (real API server, scheduler, controller
manager, Kueue and KubeRay; KWOK kubelets): the gang is torn down whole, Kueue admits it again, and
the new attempt runs the same entrypoint, resuming from the same checkpoint directory.

The gang here is the whole pool (4 nodes), so a lost node leaves no spare for KubeRay's replacement
worker; `recoveryTimeoutMinutes` is 1 so Kueue acts within the test. Nothing runs Ray under KWOK, so
the driver is stood in for by the submitter pod: labelled never-ready it stays up, as `ray job submit`
does while it follows a running job; with the label removed KWOK completes it, as the submitter ends
when verl's driver exits on Ray's node-death error (docs/kubernetes.md, "When a node is lost", step 2).
KubeRay then sees a submitter finished and a Ray job not terminal and fails the attempt 30 s later
(kuberay v1.5.0 and v1.7.0 `DefaultSubmitterFinishedTimeout`), which is the failure `backoffLimit` retries.
"""

from __future__ import annotations

import copy
import fcntl
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grpo_infra import k8s as render
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import NEVER_READY_LABEL, Paths, fake_nodes
from grpo_infra.spec import Environment

from .conftest import LOCK, get, local_k8s, require_binaries, wait_until, with_changes

pytestmark = pytest.mark.cluster

LOST = "local-gpu-2"
CHECKPOINT_DIR = "/checkpoints/qwen25-05b-gsm8k"
JOB_LABEL = "grpo-infra/job"


def whole_pool_gang() -> Environment:
    def change(data: dict[str, Any]) -> None:
        data["kubernetes"]["recoveryTimeoutMinutes"] = 1
        data["tenants"] = [{"name": "rl-team", "queue": "rl-team", "gpuQuota": 32}]
        data["job"]["nodes"] = 4

    return with_changes(local_k8s(), change)


@pytest.fixture(scope="module")
def lossy() -> Iterator[tuple[Paths, Environment]]:
    require_binaries()
    env = whole_pool_gang()
    LOCK.touch(exist_ok=True)
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cluster.up("local-k8s", env)
            yield Paths(cluster.ROOT), env
        finally:
            cluster.down()


def stand_in_objects(env: Environment) -> list[dict[str, Any]]:
    objects = copy.deepcopy(render.objects(env))
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


def test_a_lost_node_tears_the_gang_down_whole_and_the_next_attempt_resumes(
    lossy: tuple[Paths, Environment],
) -> None:
    paths, env = lossy
    timeline: list[tuple[float, str]] = []
    start = time.monotonic()

    def mark(event: str) -> None:
        timeline.append((round(time.monotonic() - start, 1), event))

    warnings = cluster.apply(paths, stand_in_objects(env), validate="warn")
    assert all('unknown field "spec.rayClusterSpec.authOptions"' in w for w in warnings), warnings
    first = ready_cluster(paths, env, 120)
    first_submitter = submitter(paths, env, 60)
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
    name = first_submitter["metadata"]["name"]
    cluster.kubectl(paths, "label", "pod", name, "-n", env.job.tenant, f"{NEVER_READY_LABEL}-")
    mark("driver exits (stand-in for Ray declaring the node dead)")

    # KubeRay fails the attempt and retries it: the whole RayCluster goes, healthy workers included.
    wait_until(lambda: ray_job(paths, env).get("status", {}).get("failed", 0) >= 1, 120, "the attempt failed")
    mark("RayJob attempt Failed; KubeRay Retrying (backoffLimit)")

    def torn_down() -> bool:
        clusters = [c["metadata"]["name"] for c in get(paths, "rayclusters", "-n", env.job.tenant)["items"]]
        return first not in clusters and not [
            p for p in gpu_pods(paths, env) if p["metadata"]["labels"].get("ray.io/cluster") == first
        ]

    wait_until(torn_down, 120, "the first RayCluster and every pod of it gone")
    mark("first RayCluster torn down whole: none of its pods left")

    # The retry's new RayCluster cannot be Ready with a node missing: Kueue evicts the gang after
    # recoveryTimeout, suspending the RayJob (KubeRay deletes that cluster too) and requeueing it.
    def evicted() -> dict[str, Any] | None:
        workload = get(paths, "workloads", "-n", env.job.tenant)["items"][0]
        conditions = {c["type"]: c for c in workload["status"].get("conditions", [])}
        return conditions.get("Evicted") if conditions.get("Evicted", {}).get("status") == "True" else None

    eviction = wait_until(evicted, 240, "Kueue evicts the gang that cannot get ready")
    mark(f"Kueue evicted the gang: {eviction.get('reason')}")
    wait_until(lambda: not gpu_pods(paths, env), 120, "no pod holding a GPU while the gang waits")
    mark("no pod of the job holds a GPU")
    failed_before = ray_job(paths, env)["status"].get("failed", 0)

    # Kueue admits the gang again after its requeue backoff; the new workers wait for capacity.
    wait_until(lambda: ray_job(paths, env)["spec"].get("suspend") is False and gpu_pods(paths, env), 300, "readmitted")
    mark("readmitted by Kueue; new workers waiting for a node")
    lost = next(n for n in fake_nodes(env) if n["metadata"]["name"] == LOST)
    cluster.apply(paths, [lost])
    mark(f"node {LOST} back")
    second = ready_cluster(paths, env, 240, other_than=first)
    attempt = submitter(paths, env, 120, other_than=first_submitter["metadata"]["uid"])
    assert ray_job(paths, env)["status"].get("failed", 0) == failed_before  # the eviction spent no retry
    cluster.kubectl(paths, "label", "pod", attempt["metadata"]["name"], "-n", env.job.tenant, f"{NEVER_READY_LABEL}-")
    wait_until(
        lambda: (
            get(paths, "pod", attempt["metadata"]["name"], "-n", env.job.tenant)["status"].get("phase")
            in ("Running", "Succeeded")
        ),
        60,
        "the new attempt's submitter running",
    )
    mark(f"new RayCluster {second} ready; new attempt's submitter {attempt['metadata']['name']} started")

    # The new attempt runs the same entrypoint: resume from the newest checkpoint of the same directory.
    container = attempt["spec"]["containers"][0]
    command = " ".join(container.get("command", []) + container.get("args", []))
    assert "trainer.resume_mode=auto" in command, command
    assert f"trainer.default_local_dir={CHECKPOINT_DIR}" in command, command
    for pod in gpu_pods(paths, env):
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        source = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
        assert mounts["checkpoints"] == CHECKPOINT_DIR
        assert source["hostPath"]["path"] == "/var/lib/grpo-checkpoints"
    print("\n".join(f"{t:7.1f}s  {e}" for t, e in timeline))
