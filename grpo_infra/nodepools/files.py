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
from .charts import device_plugin_releases
from .rdma import rdma_device_plugin_objects
from .resources import PoolResources, all_pool_resources

# Before any block starts: every scheduled action of a block is still ahead.
_BEFORE_ANY_BLOCK = datetime.min.replace(tzinfo=UTC)
DESIRED_BY_SCHEDULE = "set by the scheduled actions (the Capacity Block's window)"


def _file(resources: PoolResources) -> dict[str, Any]:
    """A pool's resources as its review file, with no wall-clock input (see the module docstring)."""
    body: dict[str, Any] = {"provider": resources.provider}
    if resources.node_group is not None:
        group = resources.node_group
        if resources.schedule:
            group = {**group, "scaling_config": {**group["scaling_config"], "desired_size": DESIRED_BY_SCHEDULE}}
        body["nodeGroup"] = group
        if resources.schedule:
            body["schedule"] = list(resources.schedule)
        if resources.launch_template is not None:
            body["launchTemplate"] = resources.launch_template
    if resources.node_pool is not None:
        body["nodePool"] = resources.node_pool
    if resources.node_group is None and resources.node_pool is None:
        body["nodePatches"] = list(resources.node_patches)
    return body


def render_files(env: Environment) -> dict[str, str]:
    """`nodepools/<pool>.yaml` per pool (the head pool's too, where the stack creates it), and the device
    plugins: `nodepools/device-plugins.yaml` (Helm releases), `nodepools/rdma-device-plugin.yaml`."""
    files = {f"nodepools/{r.name}.yaml": dump_yaml(_file(r)) for r in all_pool_resources(env, _BEFORE_ANY_BLOCK)}
    releases = device_plugin_releases(env)
    if releases:
        files["nodepools/device-plugins.yaml"] = dump_yaml(releases)
    rdma = rdma_device_plugin_objects(env)
    if rdma:
        files["nodepools/rdma-device-plugin.yaml"] = "---\n".join(dump_yaml(o) for o in rdma)
    return files
