"""CPU and memory scaled by one factor per pool, so "this pod fits this node" is the cloud's arithmetic.

A local node is this machine: every kubelet reports its CPUs and memory. A pool's node in the cloud has
its own allocatable (grpo_infra/k8s/allocatable.py: the provider's reservation, the kernel-visible
memory). The pool's factor is local allocatable / cloud allocatable, per resource; every CPU and memory
quantity the stack renders for that pool (its pods' requests and limits, its flavor's quota) is
multiplied by it (init containers, fixed-size programs, are not), but CPU limits. A pod that fits the cloud node fits the local one by the same margin, and one that does
not, does not: nothing is loosened where it decides the fit.

A CPU limit decides how fast a process runs, not where its pod fits (the scheduler reads requests), and a
limit cut by the factor makes every timeout the stack sets that much shorter in effect: the submitter's
500m became 31m in eks-prod's rehearsal, where its liveness probe (a `python3` check of the head's GCS every
5 s, timeout 5 s) ran out of time for a minute and killed every attempt that ran longer than that, which the
cloud's submitter would not (seen in the `worker-node` drill). CPU limits stay the stack's own. The head pool has its own factor; a stack without one says nothing of
the head's node, so its head is rehearsed unscaled where it fits a local node (local-k8s), refused otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..k8s.allocatable import head_allocatable, pool_allocatable
from ..k8s.placement import cpu_quantity, memory_quantity, parse_quantity
from ..k8s.queues import HEAD_FLAVOR, head_cpu_milli, head_memory_mi
from ..spec import Environment

# The local kubelets' eviction threshold (grpo_infra/kube/nodes.py `kubelet_config`): allocatable memory
# is the machine's less this; no CPU is reserved.
LOCAL_EVICTION_MI = 100
HEAD = "head"


@dataclass(frozen=True)
class Factor:
    """One pool's scale: local allocatable over the cloud node's, per resource."""

    pool: str
    cpu: float
    memory: float
    cloud: tuple[int, int]
    local: tuple[int, int]

    def line(self) -> str:
        (cc, cm), (lc, lm) = self.cloud, self.local
        return (
            f"{self.pool}: cpu × {self.cpu:.4f} ({lc}m local / {cc}m allocatable in the cloud), "
            f"memory × {self.memory:.4f} ({lm}Mi / {cm}Mi)"
        )


def local_allocatable() -> tuple[int, int]:
    """(millicores, MiB) a local node's kubelet reports as allocatable: this machine's, less eviction."""
    with open("/proc/meminfo", encoding="utf-8") as handle:
        total_kib = next(int(line.split()[1]) for line in handle if line.startswith("MemTotal:"))
    return (os.cpu_count() or 1) * 1000, total_kib // 1024 - LOCAL_EVICTION_MI


def factors(env: Environment, local: tuple[int, int]) -> dict[str, Factor]:
    """Each GPU pool's factor, and the head's (`HEAD`) where the stack declares a head pool."""

    def factor(name: str, cloud: tuple[int, int]) -> Factor:
        return Factor(name, local[0] / cloud[0], local[1] / cloud[1], cloud, local)

    out = {}
    for pool in env.pools:
        a = pool_allocatable(env, pool.name)
        out[pool.name] = factor(pool.name, (a.cpu_milli, a.memory_mi))
    head = head_allocatable(env)
    if head is not None:
        out[HEAD] = factor(HEAD, (head.cpu_milli, head.memory_mi))
    elif head_cpu_milli(env) > local[0] or head_memory_mi(env) > local[1]:
        raise ValueError(
            f"kubernetes.headPool: not declared, so the Ray head ({head_cpu_milli(env)}m CPU, {head_memory_mi(env)}Mi) "
            "may land on any untainted node, of a size the stack does not say, and does not fit a local node "
            f"({local[0]}m, {local[1]}Mi) unscaled; declare the CPU nodes it runs on (kubernetes.headPool: cpus, "
            "memoryGib, labels) to rehearse it"
        )
    return out


def scale_object(env: Environment, obj: dict[str, Any], by: dict[str, Factor]) -> dict[str, Any]:
    """`obj` with every pod spec's and flavor quota's CPU and memory scaled by its pool's factor (CPU limits kept)."""
    if obj.get("kind") == "ClusterQueue":
        for group in obj.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                name = HEAD if flavor["name"] == HEAD_FLAVOR else flavor["name"]
                for resource in flavor.get("resources", []):
                    resource["nominalQuota"] = _scaled(resource["name"], resource["nominalQuota"], by.get(name))
        return obj
    _walk(env, obj, by)
    return obj


def pod_pool(env: Environment, pod_spec: dict[str, Any]) -> str:
    """The pool a pod spec lands on: the GPU pool whose labels its node selector holds, else the head's."""
    selector = pod_spec.get("nodeSelector") or {}
    for pool in env.pools:
        if pool.labels and all(selector.get(k) == v for k, v in pool.labels.items()):
            return pool.name
    return HEAD


def _walk(env: Environment, node: Any, by: dict[str, Factor]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            factor = by.get(pod_pool(env, node))
            # Init containers (the image guard) are programs of a fixed size, not a share of the node; a pod's
            # fit is decided by its containers' sum unless an init container is larger, which none is.
            for container in node["containers"]:
                for kind, names in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
                    values = container.get("resources", {}).get(kind, {})
                    for name in names:
                        if name in values:
                            values[name] = _scaled(name, values[name], factor)
        for value in node.values():
            _walk(env, value, by)
    elif isinstance(node, list):
        for value in node:
            _walk(env, value, by)


def _scaled(name: str, quantity: Any, factor: Factor | None) -> Any:
    if factor is None or name not in ("cpu", "memory"):
        return quantity
    value = parse_quantity(quantity)
    if name == "cpu":
        return cpu_quantity(max(1, int(value * 1000 * factor.cpu)))
    return memory_quantity(max(1, int(value / 2**20 * factor.memory)))
