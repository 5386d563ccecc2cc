"""Where the gang runs and what one node gives it: the pool's labels, taints and capacity.

Every consumer — the ResourceFlavor, the ClusterQueue quota, the RayJob's pods — calls these, so a
change to the pool (a taint, a size, a reserve) moves all of them together.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import Environment
from ..spec.pools import Pool, Taint


def node_selector(pool: Pool) -> dict[str, str]:
    """The pool's node labels: what its pods select and its ResourceFlavor matches."""
    return dict(pool.labels)


def node_taints(pool: Pool) -> list[dict[str, str]]:
    """The pool's taints as Kubernetes `Taint` objects."""
    return [_taint(t) for t in pool.taints]


def tolerations(pool: Pool) -> list[dict[str, str]]:
    """One toleration per pool taint: exactly what lets the gang's pods onto the pool's nodes."""
    out = []
    for t in pool.taints:
        toleration = {"key": t.key, "operator": "Equal" if t.value is not None else "Exists", "effect": t.effect}
        if t.value is not None:
            toleration["value"] = t.value
        out.append(toleration)
    return out


def _taint(t: Taint) -> dict[str, str]:
    taint = {"key": t.key, "effect": t.effect}
    if t.value is not None:
        taint["value"] = t.value
    return taint


@dataclass(frozen=True)
class NodeShare:
    """What one node of a pool offers a pod after the per-node reserve: the worker's request."""

    cpu_milli: int
    memory_mi: int
    gpus: int
    gpu_resource: str
    fabric: int
    fabric_resource: str | None

    def resources(self) -> dict[str, str]:
        """A Kubernetes ResourceList for one whole node."""
        out = {"cpu": cpu_quantity(self.cpu_milli), "memory": memory_quantity(self.memory_mi)}
        out[self.gpu_resource] = str(self.gpus)
        if self.fabric_resource:
            out[self.fabric_resource] = str(self.fabric)
        return out


def node_share(env: Environment, pool: Pool) -> NodeShare:
    """What the worker pod asks for: a node's allocatable (the provider's reservation rules,
    `grpo_infra.k8s.allocatable`) minus the stack's DaemonSets on it, minus `nodeReserve` on EKS and GKE;
    in whole millicores and MiB."""
    # Imported here: grpo_infra.nodepools renders node groups from this module's placement rules.
    from ..nodepools.charts import daemonset_requests
    from .allocatable import extra_reserve, pool_allocatable

    allocatable = pool_allocatable(env, pool.name)
    daemons = daemonset_requests(env, pool)
    extra_cpu, extra_memory = extra_reserve(env)
    return NodeShare(
        cpu_milli=allocatable.cpu_milli - sum(d[1] for d in daemons) - extra_cpu,
        memory_mi=allocatable.memory_mi - sum(d[2] for d in daemons) - extra_memory,
        gpus=pool.gpu.per_node,
        gpu_resource=pool.gpu.resource,
        fabric=pool.fabric.devices_per_node,
        fabric_resource=pool.fabric.resource,
    )


def cpu_quantity(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_quantity(mi: int) -> str:
    return f"{mi // 1024}Gi" if mi % 1024 == 0 else f"{mi}Mi"


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (cores, bytes or a count), for comparing requests with quotas."""
    if isinstance(value, (int, float)):
        return float(value)
    suffixes = {
        "m": 1e-3,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
    }
    for suffix in sorted(suffixes, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * suffixes[suffix]
    return float(value)
