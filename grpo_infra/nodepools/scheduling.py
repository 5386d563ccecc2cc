"""How a pod lands on a pool's nodes: the pool's labels select, its taints are tolerated.

One function per rule, so that everything scheduled onto a pool (the gang, the device plugins, the
queue's flavor) follows the pool when its labels or taints change.
"""

from __future__ import annotations

from typing import Any

from ..spec.pools import Pool, Taint


def taint(t: Taint) -> dict[str, Any]:
    """A taint as a Kubernetes Node carries it."""
    out: dict[str, Any] = {"key": t.key}
    if t.value is not None:
        out["value"] = t.value
    out["effect"] = t.effect
    return out


def toleration(t: Taint) -> dict[str, Any]:
    """The toleration of exactly this taint (its value too, when it has one)."""
    if t.value is None:
        return {"key": t.key, "operator": "Exists", "effect": t.effect}
    return {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}


def tolerations(pools: list[Pool]) -> list[dict[str, Any]]:
    """Tolerations for every taint of these pools, without repeats, in pool order."""
    out: list[dict[str, Any]] = []
    for pool in pools:
        for t in pool.taints:
            if toleration(t) not in out:
                out.append(toleration(t))
    return out


def node_affinity(pools: list[Pool]) -> dict[str, Any]:
    """A required node affinity matching any of these pools' nodes (one selector term per pool)."""
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pool.labels.items())]}
        for pool in pools
        if pool.labels
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
