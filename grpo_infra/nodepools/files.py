"""The node pools as files: what `pulumi up` creates for a stack's nodes, for review beside its objects.

Node groups, launch templates, Capacity Block schedules, GKE node pools, the labels and taints patched
onto existing nodes and the device plugins are the most expensive resources a stack makes; `synth` and
`diff` show them from the same functions `components/nodepools.py` registers, so a changed instance
type or node count is one hunk in review.

The files hold no wall-clock input. On a Capacity Block the node group's desired size belongs to its
scheduled actions (the component never resets it, `ignore_changes`), so the file lists every action of
the block and leaves the desired size to them instead of rendering it as of the moment of `synth`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..manifests import dump_yaml
from ..spec import Environment
from ..spec.pools import Pool
from .capacity_blocks import block_of, scheduled_actions
from .charts import device_plugin_releases
from .eks import head_node_group_args, launch_template_args, node_group_args
from .existing import node_patches
from .gke import head_node_pool_args, node_pool_args
from .rdma import rdma_device_plugin_objects

# Before any block starts: every scheduled action of a block is still ahead.
_BEFORE_ANY_BLOCK = datetime.min.replace(tzinfo=UTC)
DESIRED_BY_SCHEDULE = "set by the scheduled actions (the Capacity Block's window)"


def _eks_pool(env: Environment, pool: Pool) -> dict[str, Any]:
    group = node_group_args(env, pool, _BEFORE_ANY_BLOCK)
    body: dict[str, Any] = {"nodeGroup": group}
    if block_of(pool) is not None:
        group["scaling_config"]["desired_size"] = DESIRED_BY_SCHEDULE
        body["schedule"] = scheduled_actions(pool, _BEFORE_ANY_BLOCK)
    template = launch_template_args(env, pool)
    if template is not None:
        body["launchTemplate"] = template
    return body


def _pool(env: Environment, pool: Pool) -> dict[str, Any]:
    assert env.kubernetes is not None
    provider = env.kubernetes.provider
    if provider == "eks":
        return {"provider": "eks", **_eks_pool(env, pool)}
    if provider == "gke":
        return {"provider": "gke", "nodePool": node_pool_args(env, pool)}
    return {"provider": provider, "nodePatches": node_patches(env, pool)}


def _head_pool(env: Environment) -> dict[str, Any] | None:
    """The head pool's nodes where the stack creates them (EKS, GKE); existing clusters already have them."""
    assert env.kubernetes is not None
    if env.kubernetes.head_pool is None:
        return None
    if env.kubernetes.provider == "eks":
        return {"provider": "eks", "nodeGroup": head_node_group_args(env)}
    if env.kubernetes.provider == "gke":
        return {"provider": "gke", "nodePool": head_node_pool_args(env)}
    return None


def render_files(env: Environment) -> dict[str, str]:
    """`nodepools/<pool>.yaml` per pool (the head pool's too, where the stack creates it), and the device
    plugins: `nodepools/device-plugins.yaml` (Helm releases), `nodepools/rdma-device-plugin.yaml`."""
    files = {f"nodepools/{pool.name}.yaml": dump_yaml(_pool(env, pool)) for pool in env.pools}
    head = _head_pool(env)
    if head is not None:
        assert env.kubernetes is not None and env.kubernetes.head_pool is not None
        files[f"nodepools/{env.kubernetes.head_pool.name}.yaml"] = dump_yaml(head)
    releases = device_plugin_releases(env)
    if releases:
        files["nodepools/device-plugins.yaml"] = dump_yaml(releases)
    rdma = rdma_device_plugin_objects(env)
    if rdma:
        files["nodepools/rdma-device-plugin.yaml"] = "---\n".join(dump_yaml(o) for o in rdma)
    return files
