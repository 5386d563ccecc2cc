"""Kueue's queues: flavors from the pools, quotas from their size, one ClusterQueue per tenant.

How tenant quotas are enforced: every tenant gets its own ClusterQueue, all in one cohort. Its GPU
quota on the pools is the tenant's `gpuQuota` (filled pool by pool, in spec order), and its CPU,
memory and fabric quotas are that many GPUs' share of the nodes (capacity minus `nodeReserve`, per
GPU). `borrowingLimit: 0` makes the quota a hard cap: a team never holds more than its GPUs, even
when another team's are idle. A second flavor, `ray-head`, holds the CPU-only head and submitter pods:
the pool flavors carry the pool's taints as `nodeTaints`, which those pods do not tolerate, so Kueue
never places them on GPU nodes the workers fill completely.
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from ..spec.tenants import Tenant
from .allocatable import head_room
from .labels import MANAGED_BY
from .placement import cpu_quantity, memory_quantity, node_selector, node_share, node_taints

KUEUE = "kueue.x-k8s.io/v1beta2"
COHORT = "grpo-gpus"
HEAD_FLAVOR = "ray-head"
# The submitter pod KubeRay starts for a RayJob in K8sJobMode; it is admitted with the head.
SUBMITTER_CPU_MILLI = 500
SUBMITTER_MEMORY_MI = 1024


def cluster_queue_name(tenant: Tenant) -> str:
    return f"grpo-{tenant.name}"


def head_cpu_milli(env: Environment) -> int:
    assert env.kubernetes is not None
    return round(env.kubernetes.ray_job.head_cpus * 1000)


def head_memory_mi(env: Environment) -> int:
    assert env.kubernetes is not None
    return int(env.kubernetes.ray_job.head_memory_gib * 1024)


def heads_the_pool_holds(env: Environment) -> int | None:
    """How many jobs' head-and-submitter pairs the head pool holds at once; None without a head pool.

    Kueue must not admit more heads than that: a head that fits the quota but no node stays Pending,
    and waitForPodsReady evicts and requeues its whole gang, again and again.
    """
    assert env.kubernetes is not None
    room = head_room(env)
    head = env.kubernetes.head_pool
    if room is None or head is None:
        return None
    cpu = head_cpu_milli(env) + SUBMITTER_CPU_MILLI
    memory = head_memory_mi(env) + SUBMITTER_MEMORY_MI
    per_node = max(0, min(room[0] // cpu, room[1] // memory))
    return per_node * head.nodes


def head_slots(env: Environment, tenant: Tenant) -> int:
    """Heads (with their submitters) a tenant's queue admits: one per job its GPUs could run at once
    (one node each at least), no more than the head pool holds."""
    slots = tenant.gpu_quota // min(p.gpu.per_node for p in env.pools)
    held = heads_the_pool_holds(env)
    return slots if held is None else min(slots, held)


def resource_names(env: Environment) -> list[str]:
    """Resources every ClusterQueue covers: cpu, memory, then each pool's GPU and fabric resource."""
    names = ["cpu", "memory"]
    for pool in env.pools:
        for name in (pool.gpu.resource, pool.fabric.resource):
            if name and name not in names:
                names.append(name)
    return names


def gpu_split(env: Environment, tenant: Tenant) -> dict[str, int]:
    """The tenant's GPU quota per pool, filled pool by pool in spec order; sums to `gpuQuota`."""
    left, out = tenant.gpu_quota, {}
    for pool in env.pools:
        out[pool.name] = min(left, pool.gpu_count)
        left -= out[pool.name]
    return out


def resource_flavors(env: Environment) -> list[dict[str, Any]]:
    """One flavor per pool (its labels and taints; its topology when set) and the head's CPU flavor."""
    assert env.kubernetes is not None
    flavors = []
    for pool in env.pools:
        spec: dict[str, Any] = {"nodeLabels": node_selector(pool)}
        if pool.taints:
            spec["nodeTaints"] = node_taints(pool)
        if env.kubernetes.topology is not None:
            spec["topologyName"] = env.kubernetes.topology.name
        flavors.append(_object("ResourceFlavor", pool.name, spec))
    head = env.kubernetes.head_pool
    # The head pool's labels: Kueue places the head and the submitter there (empty: any untainted node).
    flavors.append(_object("ResourceFlavor", HEAD_FLAVOR, {"nodeLabels": dict(head.labels)} if head else {}))
    return flavors


def topologies(env: Environment) -> list[dict[str, Any]]:
    """The Topology the pool flavors refer to, its levels coarsest first, from the spec."""
    assert env.kubernetes is not None
    topology = env.kubernetes.topology
    if topology is None:
        return []
    return [_object("Topology", topology.name, {"levels": [{"nodeLabel": level} for level in topology.levels]})]


def cluster_queues(env: Environment) -> list[dict[str, Any]]:
    """One ClusterQueue per tenant, admitting only from the tenant's namespace."""
    covered = resource_names(env)
    queues = []
    for tenant in env.tenants:
        split = gpu_split(env, tenant)
        flavors = []
        for pool in env.pools:
            share, gpus = node_share(env, pool), split[pool.name]
            quota = {
                "cpu": cpu_quantity(share.cpu_milli * gpus // share.gpus),
                "memory": memory_quantity(share.memory_mi * gpus // share.gpus),
                share.gpu_resource: str(gpus),
            }
            if share.fabric_resource:
                quota[share.fabric_resource] = str(share.fabric * gpus // share.gpus)
            flavors.append({"name": pool.name, "resources": [_quota(r, quota.get(r, "0")) for r in covered]})
        slots = head_slots(env, tenant)
        head = {
            "cpu": cpu_quantity((head_cpu_milli(env) + SUBMITTER_CPU_MILLI) * slots),
            "memory": memory_quantity((head_memory_mi(env) + SUBMITTER_MEMORY_MI) * slots),
        }
        flavors.append({"name": HEAD_FLAVOR, "resources": [_quota(r, head.get(r, "0")) for r in covered]})
        spec = {
            "cohortName": COHORT,
            "namespaceSelector": {
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [tenant.name]}]
            },
            # A gang waits its turn: a smaller job behind it may not jump the queue and starve it.
            "queueingStrategy": "StrictFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        }
        queues.append(_object("ClusterQueue", cluster_queue_name(tenant), spec))
    return queues


def local_queues(env: Environment) -> list[dict[str, Any]]:
    """The queue each tenant submits to, in its namespace."""
    return [
        _object("LocalQueue", t.queue, {"clusterQueue": cluster_queue_name(t)}, namespace=t.name) for t in env.tenants
    ]


def priority_classes(env: Environment) -> list[dict[str, Any]]:
    """Kueue WorkloadPriorityClasses (they order and preempt workloads; pods keep their own priority)."""
    assert env.kubernetes is not None
    return [
        {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": _meta(name), "value": value}
        for name, value in sorted(env.kubernetes.priority_classes.items(), key=lambda kv: -kv[1])
    ]


def volcano_queues(env: Environment) -> list[dict[str, Any]]:
    """Under Volcano: one Volcano Queue per tenant, capped at the tenant's GPU quota."""
    gpu_resources = sorted({p.gpu.resource for p in env.pools})
    return [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": _meta(t.queue),
            "spec": {"reclaimable": False, "capability": {r: str(t.gpu_quota) for r in gpu_resources}},
        }
        for t in env.tenants
    ]


def queue_objects(env: Environment) -> list[dict[str, Any]]:
    """Every queueing object, in apply order."""
    assert env.kubernetes is not None
    if env.kubernetes.scheduler == "volcano":
        return volcano_queues(env)
    return [
        *priority_classes(env),
        *topologies(env),
        *resource_flavors(env),
        *cluster_queues(env),
        *local_queues(env),
    ]


def _quota(resource: str, nominal: str) -> dict[str, Any]:
    return {"name": resource, "nominalQuota": nominal, "borrowingLimit": "0"}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(MANAGED_BY)
    return meta


def _object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": kind, "metadata": _meta(name, namespace), "spec": spec}
