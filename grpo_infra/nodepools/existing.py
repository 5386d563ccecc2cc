"""Existing clusters: the pool's labels and taints, put on the named nodes by server-side apply.

Each node gets one patch (a `kubernetes:core/v1:NodePatch`), so `pulumi destroy` removes exactly
the fields this stack applied. Node taints are an atomic list in the Kubernetes API: the patch owns
the node's whole `spec.taints`, and a taint another tool set on these nodes makes `pulumi up` report a
conflict instead of silently replacing it (no patchForce).
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from .eks import NodePoolError
from .labels import node_selector, node_taints


def node_patches(env: Environment, pool: Pool) -> list[dict[str, Any]]:
    """One Node patch per host of the pool: its labels and its taints, nothing else."""
    if env.kubernetes is None or env.kubernetes.provider != "existing" or not pool.host_names:
        raise NodePoolError(f"pool {pool.name} is not a pool of an existing cluster's hosts")
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": host, "labels": node_selector(pool)},
            "spec": {"taints": node_taints(pool)},
        }
        for host in pool.host_names
    ]
