"""Node pool renderers: spec → plain resource arguments for EKS, GKE and existing clusters.

Pure functions, no Pulumi imports: `components/nodepools.py` registers exactly what these return,
and tests read them directly.
"""

from __future__ import annotations

from .charts import device_plugin_releases
from .efa import EFA_INTERFACES, efa_interfaces
from .eks import AMI_TYPE, NodePoolError, head_node_group_args, launch_template_args, node_group_args
from .existing import node_patches
from .gke import cluster_location, head_node_pool_args, node_pool_args
from .rdma import rdma_device_plugin_objects
from .scheduling import node_affinity, tolerations

__all__ = [
    "AMI_TYPE",
    "EFA_INTERFACES",
    "NodePoolError",
    "cluster_location",
    "device_plugin_releases",
    "efa_interfaces",
    "head_node_group_args",
    "head_node_pool_args",
    "launch_template_args",
    "node_affinity",
    "node_group_args",
    "node_patches",
    "node_pool_args",
    "rdma_device_plugin_objects",
    "tolerations",
]
