"""What a pool's nodes carry and what lets the gang onto them: labels, taints, tolerations.

The one place these per-pool rules live: the node-pool renderers put the labels and taints on the
nodes, and `grpo_infra.k8s` (the ResourceFlavor, the ClusterQueue, the Ray pods) selects and tolerates
them from the same functions, so a change to the pool moves all of them together.
"""

from __future__ import annotations

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
