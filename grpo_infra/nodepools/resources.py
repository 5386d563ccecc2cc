"""Which resources make each pool's nodes, per provider: the one rule `pulumi up` (components/nodepools.py)
and the review files (`nodepools/`, files.py) both follow.

An EKS pool is a managed node group, with a launch template for EFA or a capacity reservation and, on a
Capacity Block, the scheduled actions of its window; a GKE pool is a node pool; a pool of an existing
cluster is the labels and taints patched onto its machines. The head pool's CPU nodes are created where
the stack creates nodes (EKS, GKE); an existing cluster already has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from .capacity_blocks import scheduled_actions
from .eks import head_node_group_args, launch_template_args, node_group_args
from .existing import node_patches
from .gke import head_node_pool_args, node_pool_args


@dataclass(frozen=True)
class PoolResources:
    """What makes one pool's nodes (exactly one of `node_group`, `node_pool`, `node_patches` is set)."""

    name: str
    provider: str
    node_group: dict[str, Any] | None = None
    launch_template: dict[str, Any] | None = None
    # A Capacity Block's scheduled actions on the node group's Auto Scaling group (none otherwise).
    schedule: tuple[dict[str, Any], ...] = ()
    node_pool: dict[str, Any] | None = None
    node_patches: tuple[dict[str, Any], ...] = field(default=())


def pool_resources(env: Environment, pool: Pool, now: datetime) -> PoolResources:
    """A GPU pool's resources; `now` decides a Capacity Block's node count and which actions are ahead."""
    assert env.kubernetes is not None
    provider = env.kubernetes.provider
    if provider == "eks":
        return PoolResources(
            pool.name,
            provider,
            node_group=node_group_args(env, pool, now),
            launch_template=launch_template_args(env, pool),
            schedule=tuple(scheduled_actions(pool, now)),
        )
    if provider == "gke":
        return PoolResources(pool.name, provider, node_pool=node_pool_args(env, pool))
    return PoolResources(pool.name, provider, node_patches=tuple(node_patches(env, pool)))


def head_pool_resources(env: Environment) -> PoolResources | None:
    """The head pool's CPU nodes where the stack creates nodes (EKS, GKE); None on an existing cluster."""
    assert env.kubernetes is not None
    head = env.kubernetes.head_pool
    if head is None:
        return None
    if env.kubernetes.provider == "eks":
        return PoolResources(head.name, "eks", node_group=head_node_group_args(env))
    if env.kubernetes.provider == "gke":
        return PoolResources(head.name, "gke", node_pool=head_node_pool_args(env))
    return None


def all_pool_resources(env: Environment, now: datetime) -> list[PoolResources]:
    """Every GPU pool's resources, then the head pool's where the stack creates it."""
    out = [pool_resources(env, pool, now) for pool in env.pools]
    head = head_pool_resources(env)
    return out + ([head] if head is not None else [])
