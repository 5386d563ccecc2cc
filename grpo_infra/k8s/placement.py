"""Where the gang runs and what one node gives it: the pool's labels, taints and capacity.

Every consumer — the ResourceFlavor, the ClusterQueue quota, the Ray pods — calls these, so a change
to the pool (a taint, a size, a reserve) moves all of them together. The labels, taints and
tolerations themselves live one layer down, in `grpo_infra.nodepools.labels`, which the node-pool
renderers use too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..nodepools.charts import daemonset_requests
from ..nodepools.labels import node_selector, node_taints, tolerations
from ..spec import Environment
from ..spec.pools import Pool
from .allocatable import extra_reserve, pool_allocatable

__all__ = [
    "NodeShare",
    "cpu_quantity",
    "memory_quantity",
    "node_selector",
    "node_share",
    "node_taints",
    "parse_quantity",
    "tolerations",
]


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


def _row(label: str, mi: float, note: str = "") -> str:
    return f"  {label:<40}{mi / 1024:>10.2f} GiB   {note}".rstrip()


def share_arithmetic(env: Environment, pool: Pool) -> list[str]:
    """How one node of `pool` becomes the worker's request, step by step (`grpo-infra check --explain`):
    nominal memory → what the kernel shows → the provider's reservation → the DaemonSets → the headroom."""
    assert env.kubernetes is not None
    allocatable = pool_allocatable(env, pool.name)
    daemons = daemonset_requests(env, pool)
    extra_cpu, extra_memory = extra_reserve(env)
    share = node_share(env, pool)
    machine = pool.eks.instance_type if pool.eks else pool.gke.machine_type if pool.gke else "existing hosts"
    headroom = env.kubernetes.provider != "existing"
    lines = [
        f"pool {pool.name} ({machine}, provider {env.kubernetes.provider}), memory per node:",
        _row("nominal", allocatable.nominal_memory_mi),
        _row("kernel-visible capacity", allocatable.capacity_memory_mi, allocatable.capacity_source),
        _row("− reserved", allocatable.reserved_memory_mi, allocatable.rule),
        _row("− eviction threshold", allocatable.eviction_memory_mi),
        _row("= allocatable", allocatable.memory_mi),
        *(_row(f"− DaemonSet {name}", memory) for name, _, memory in daemons),
    ]
    if headroom:
        lines.append(_row("− nodeReserve (headroom)", extra_memory))
    lines.append(_row("= worker request", share.memory_mi, memory_quantity(share.memory_mi)))
    lines.append(
        f"  cpu: {allocatable.capacity_cpu_milli}m − {allocatable.reserved_cpu_milli}m reserved"
        f" − {sum(d[1] for d in daemons)}m DaemonSets"
        + (f" − {extra_cpu}m nodeReserve" if headroom else "")
        + f" = {share.cpu_milli}m worker request"
    )
    return lines
