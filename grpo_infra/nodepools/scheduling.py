"""Scheduling onto several pools at once (the device plugins), built on the per-pool rules.

The per-pool rules — a pool's node labels, taints and tolerations — live in `grpo_infra.nodepools.labels`,
which the ResourceFlavor and the Ray pods also call: one rule, so everything follows a pool's change.
"""

from __future__ import annotations

from typing import Any

from ..spec.pools import Pool
from .labels import node_selector, node_taints
from .labels import tolerations as pool_tolerations


def tolerations(pools: list[Pool]) -> list[dict[str, Any]]:
    """Tolerations for every taint of these pools, without repeats, in pool order."""
    out: list[dict[str, Any]] = []
    for pool in pools:
        for toleration in pool_tolerations(pool):
            if toleration not in out:
                out.append(toleration)
    return out


def node_affinity(pools: list[Pool]) -> dict[str, Any]:
    """A required node affinity matching any of these pools' nodes (one selector term per pool)."""
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]}
        for labels in (node_selector(pool) for pool in pools)
        if labels
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


__all__ = ["node_affinity", "node_taints", "tolerations"]
