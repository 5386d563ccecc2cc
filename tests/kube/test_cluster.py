"""The stack's rendered objects on a real API server with Kueue and KubeRay running: accepted by the
real CRDs, the gang admitted whole or not at all, the RayCluster made and Ready on the pool's nodes."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import pytest

from grpo_infra import job_wait
from grpo_infra import k8s as render
from grpo_infra.k8s.queues import cluster_queue_name
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import Paths, pool_nodes

from .conftest import get, local_k8s, stack_objects, unsuspended, wait_until, with_changes

# On the session's local-k8s cluster with KWOK nodes (conftest.py `kube`).
pytestmark = pytest.mark.cluster("kwok")


def apply_stack(paths: Paths, objects: list[dict[str, Any]]) -> None:
    """Applied as Pulumi applies them (server-side apply): a field the real CRDs do not declare is
    refused, and the API server has nothing to warn about."""
    assert cluster.apply(paths, objects) == []


def delete_stack(paths: Paths, objects: list[dict[str, Any]]) -> None:
    """Dependents first (the RayJob while KubeRay and Kueue run), namespaces last."""
    for obj in reversed(objects):
        meta = obj["metadata"]
        ns = [f"--namespace={meta['namespace']}"] if meta.get("namespace") else []
        kind = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else obj["kind"]
        cluster.kubectl(paths, "delete", kind, meta["name"], *ns, "--ignore-not-found", "--timeout=90s", timeout=120)


def ray_job(paths: Paths, env) -> dict[str, Any]:
    return get(paths, "rayjob", env.job.name, "-n", env.job.tenant)


def pods(paths: Paths, namespace: str) -> list[dict[str, Any]]:
    return get(paths, "pods", "-n", namespace)["items"]


def test_the_gang_is_admitted_whole_and_its_raycluster_becomes_ready_on_the_pools_nodes(kube: Paths) -> None:
    env = local_k8s()
    objects = stack_objects(env)
    apply_stack(kube, objects)  # every object accepted by the real API server and CRDs (strict fields)
    try:
        wait_until(lambda: unsuspended(j := ray_job(kube, env)) and j, 60, "admitted")
        workloads = get(kube, "workloads", "-n", env.job.tenant)["items"]
        assert len(workloads) == 1
        admission = workloads[0]["status"]["admission"]
        assert admission["clusterQueue"] == cluster_queue_name(env.tenants[0])
        name = wait_until(lambda: ray_job(kube, env).get("status", {}).get("rayClusterName"), 60, "RayCluster")
        rc = wait_until(
            lambda: (
                (c := get(kube, "raycluster", name, "-n", env.job.tenant)).get("status", {}).get("state") == "ready"
                and c
            ),
            90,
            "RayCluster ready",
        )
        assert rc["status"]["readyWorkerReplicas"] == 3
        workers = [p for p in pods(kube, env.job.tenant) if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        assert len(workers) == 3
        # One whole node each, on the pool's nodes only (label, taint tolerated), all Running and Ready.
        assert sorted(p["spec"]["nodeName"] for p in workers) == sorted(set(p["spec"]["nodeName"] for p in workers))
        assert all(p["spec"]["nodeName"].startswith("local-gpu-") for p in workers)
        for p in workers:
            assert {"key": "grpo-infra/gpu", "operator": "Equal", "value": "sim", "effect": "NoSchedule"} in p["spec"][
                "tolerations"
            ]
            assert p["status"]["phase"] == "Running" and p["status"].get("podIP")
        head = [p for p in pods(kube, env.job.tenant) if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        assert [p["spec"]["nodeName"] for p in head] == ["grpo-cpu-0"]
        # KubeRay's dashboard queries look its head Service up; only on loopback (cluster.py _loopback_resolver).
        log = kube.logs / "ray-operator.log"
        resolvers = wait_until(
            lambda: set(re.findall(r"svc\.cluster\.local on ([\d.]+):53", log.read_text())), 60, "a dashboard lookup"
        )
        assert resolvers == {"127.0.0.1"}, resolvers
    finally:
        delete_stack(kube, objects)


def test_a_gang_one_node_over_quota_creates_no_pod_until_the_quota_is_raised(kube: Paths) -> None:
    def short(data: dict[str, Any]) -> None:
        data["tenants"][0]["gpuQuota"] = 16  # two of the three 8-GPU nodes the gang needs

    env = with_changes(local_k8s(), short)
    objects = stack_objects(env)
    apply_stack(kube, objects)
    try:
        wait_until(lambda: next(iter(get(kube, "workloads", "-n", env.job.tenant)["items"]), None), 30, "a Workload")
        conditions = {c["type"]: c for c in wait_until(lambda: workload_conditions(kube, env), 30, "conditions")}
        assert conditions["QuotaReserved"]["status"] == "False"
        assert ray_job(kube, env)["spec"]["suspend"] is True
        assert "rayClusterName" not in ray_job(kube, env).get("status", {})
        assert pods(kube, env.job.tenant) == []
        # A rehearsal (nothing else holds the quota) says so in one line, in Kueue's words, instead of waiting.
        kubectl = functools.partial(cluster.kubectl, kube)
        with pytest.raises(job_wait.WaitError) as stuck:
            job_wait.wait(env, kubectl, lambda _: None, timeout=60, poll=1, unschedulable_after=2)
        assert re.fullmatch(
            rf"rayjob {env.job.tenant}/{env.job.name}: not admitted after \d+s, and no other job holds the quota "
            r"here: couldn't assign flavors to pod set .*insufficient (unused )?quota for nvidia\.com/gpu.*",
            str(stuck.value),
        ), stuck.value
        # Raising the quota in the stack and applying it again admits the same gang, whole.
        apply_stack(kube, [o for o in stack_objects(local_k8s()) if o["kind"] == "ClusterQueue"])
        wait_until(lambda: unsuspended(ray_job(kube, env)), 60, "admitted after the raise")
    finally:
        delete_stack(kube, objects)


def disaggregated(gpu_quota: int) -> Any:
    """local-k8s as a disaggregated job: the trainer on 2 of the 8-GPU nodes (pool sim-gpu, local-gpu-[1-2]), the
    rollout on a pool of two 4-GPU nodes of its own (sim-rollout), the tenant's quota filled pool by pool."""

    def change(data: dict[str, Any]) -> None:
        trainer = data["pools"][0]
        trainer["hosts"] = "local-gpu-[1-2]"
        rollout = copy.deepcopy(trainer)
        rollout.update(name="sim-rollout", hosts="local-rollout-[1-2]", labels={"grpo-infra/pool": "sim-rollout"})
        rollout["gpu"]["perNode"] = 4
        data["pools"].append(rollout)
        job = data["job"]
        del job["pool"], job["nodes"]
        job["layout"] = {
            "kind": "disaggregated",
            "trainer": {"pool": "sim-gpu", "nodes": 2},
            "rollout": {"pool": "sim-rollout", "nodes": 2},
        }
        data["tenants"] = [{**data["tenants"][0], "gpuQuota": gpu_quota}]  # the pools hold 24 GPUs now

    return with_changes(local_k8s(), change)


def test_a_disaggregated_gang_with_its_rollout_a_node_short_starts_no_pod_of_either_role(kube: Paths) -> None:
    """Kueue admits every role's pod set of the one Workload together or none: with the tenant's quota one
    rollout node short (16 trainer GPUs + 4 of the 8 rollout GPUs), not even the trainer's pods are made;
    with the quota whole, both roles' workers start, each on its own pool's nodes."""
    whole, short = disaggregated(24), disaggregated(20)
    rollout_nodes = pool_nodes(whole.pool("sim-rollout"))
    apply_stack(kube, rollout_nodes)
    objects = stack_objects(short)
    apply_stack(kube, objects)
    try:
        # Kueue writes its conditions one at a time: wait for the one this asserts, not for the first.
        conditions = wait_until(
            lambda: (
                (found := {c["type"]: c for c in workload_conditions(kube, short)})
                and "QuotaReserved" in found
                and found
            ),
            30,
            "Kueue's QuotaReserved condition",
        )
        assert conditions["QuotaReserved"]["status"] == "False"
        assert "rollout" in conditions["QuotaReserved"]["message"], conditions["QuotaReserved"]
        assert ray_job(kube, short)["spec"]["suspend"] is True
        assert pods(kube, short.job.tenant) == []
        apply_stack(kube, [o for o in stack_objects(whole) if o["kind"] == "ClusterQueue"])
        wait_until(lambda: unsuspended(ray_job(kube, whole)), 60, "admitted once the quota covers the rollout")

        def workers() -> dict[str, list[str]]:
            found: dict[str, list[str]] = {}
            for p in pods(kube, whole.job.tenant):
                labels = p["metadata"]["labels"]
                if labels.get("ray.io/node-type") == "worker" and p["status"].get("phase") == "Running":
                    found.setdefault(labels["ray.io/group"], []).append(p["spec"]["nodeName"])
            return found

        placed = wait_until(lambda: (w := workers()) and sum(map(len, w.values())) == 4 and w, 90, "4 workers")
        # Each role on two distinct nodes of its own pool (which two of the trainer pool's four is the scheduler's).
        assert sorted(placed) == ["rollout", "trainer"], placed
        assert sorted(placed["rollout"]) == ["local-rollout-1", "local-rollout-2"], placed
        assert len(set(placed["trainer"])) == 2 and all(n.startswith("local-gpu-") for n in placed["trainer"]), placed
    finally:
        delete_stack(kube, objects)
        for node in rollout_nodes:
            cluster.kubectl(kube, "delete", "node", node["metadata"]["name"], "--ignore-not-found")


def workload_conditions(paths: Paths, env) -> list[dict[str, Any]]:
    items = get(paths, "workloads", "-n", env.job.tenant)["items"]
    return items[0].get("status", {}).get("conditions", []) if items else []


def gang(env, name: str, priority: str) -> dict[str, Any]:
    """The stack's RayJob under another name and WorkloadPriorityClass (same queue, same size)."""
    job = copy.deepcopy(render.ray_job(env))
    job["metadata"]["name"] = name
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    return job


def test_a_high_priority_gang_preempts_a_low_one_whole(kube: Paths) -> None:
    """The queues allow preemption within a ClusterQueue by lower priority (queues.py
    `withinClusterQueue: LowerPriority`): the low gang is evicted whole, the high one admitted."""
    env = local_k8s()
    base = [o for o in stack_objects(env) if o["kind"] != "RayJob"]
    apply_stack(kube, base)
    low, high = gang(env, "gang-low", "grpo-low"), gang(env, "gang-high", "grpo-high")
    try:
        apply_stack(kube, [low])
        wait_until(lambda: worker_pods(kube, env, "gang-low") == 3, 90, "the low gang's 3 workers")
        apply_stack(kube, [high])
        wait_until(
            lambda: unsuspended(get(kube, "rayjob", "gang-high", "-n", env.job.tenant)),
            90,
            "high admitted",
        )
        wait_until(lambda: worker_pods(kube, env, "gang-low") == 0, 90, "none of the low gang's pods left")
        assert get(kube, "rayjob", "gang-low", "-n", env.job.tenant)["spec"]["suspend"] is True
        wait_until(lambda: worker_pods(kube, env, "gang-high") == 3, 90, "the high gang's 3 workers")
    finally:
        delete_stack(kube, [*base, low, high])


def worker_pods(paths: Paths, env, job: str) -> int:
    return sum(
        1
        for p in pods(paths, env.job.tenant)
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
        and p["metadata"]["labels"].get("ray.io/cluster", "").startswith(job)
        and not p["metadata"].get("deletionTimestamp")
    )
