"""GKE node pools: one per pool, fixed size, GPUs with driver installation, compact placement, gVNIC.

Keys are pulumi-gcp argument names (`gcp.container.NodePool`).
"""

from __future__ import annotations

from typing import Any

from ..image.driver import gpu_driver_version
from ..spec import Environment
from ..spec.pools import Pool
from ..spec.providers import GKE_GPU_TAINT
from .eks import NodePoolError
from .labels import node_selector

_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


def cluster_location(pool: Pool) -> str:
    """The cluster's location: as given, or the region of the pool's zone (a regional cluster)."""
    assert pool.gke is not None
    return pool.gke.cluster_location or pool.gke.zone.rsplit("-", 1)[0]


def node_pool_args(env: Environment, pool: Pool) -> dict[str, Any]:
    """The node pool for `pool`: every node in one zone, compactly placed, sized exactly."""
    if env.kubernetes is None or env.kubernetes.provider != "gke" or pool.gke is None:
        raise NodePoolError(f"pool {pool.name} is not a GKE pool")
    gke = pool.gke
    node_config: dict[str, Any] = {
        "machine_type": gke.machine_type,
        "guest_accelerators": [
            {
                "type": gke.accelerator_type,
                "count": pool.gpu.per_node,
                "gpu_driver_installation_config": {"gpu_driver_version": gpu_driver_version(env, pool)},
            }
        ],
        "gvnic": {"enabled": True},
        "labels": node_selector(pool),
        "taints": [
            {"key": t.key, "value": t.value or "", "effect": _EFFECTS[t.effect]}
            for t in pool.taints
            if (t.key, t.value, t.effect) != GKE_GPU_TAINT
        ],
    }
    if gke.reservation:
        node_config["reservation_affinity"] = {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [gke.reservation],
        }
    return {
        "name": pool.name,
        "cluster": env.kubernetes.cluster_name,
        "location": cluster_location(pool),
        "node_locations": [gke.zone],
        "node_count": pool.node_count,
        "placement_policy": {"type": "COMPACT"},
        # A node upgrade drains the node, which ends a multi-day run; a repair replaces a broken node only.
        "management": {"auto_upgrade": gke.auto_upgrade, "auto_repair": True},
        "node_config": node_config,
    }


def head_node_pool_args(env: Environment) -> dict[str, Any]:
    """The head pool's node pool: CPU machines, no taints, the head pool's labels."""
    head = env.kubernetes.head_pool if env.kubernetes is not None else None
    if env.kubernetes is None or env.kubernetes.provider != "gke" or head is None or head.gke is None:
        raise NodePoolError("the stack has no GKE head pool")
    return {
        "name": head.name,
        "cluster": env.kubernetes.cluster_name,
        "location": next((cluster_location(p) for p in env.pools if p.gke is not None), head.gke.zone[:-2]),
        "node_locations": [head.gke.zone],
        "node_count": head.nodes,
        "management": {"auto_upgrade": head.gke.auto_upgrade, "auto_repair": True},
        "node_config": {"machine_type": head.gke.machine_type, "labels": dict(head.labels)},
    }
