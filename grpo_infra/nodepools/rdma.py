"""The RDMA shared device plugin: advertises a pool's `rdma/<name>` resource from its HCAs.

Upstream ships plain manifests, not a chart (Mellanox/k8s-rdma-shared-dev-plugin v1.5.3,
deployment/k8s/base/{configmap,daemonset}.yaml): a ConfigMap `config.json` and a privileged DaemonSet
that mounts the kubelet's device-plugin directories and /dev. These are the same objects, with the
image pinned to the release, the DaemonSet scheduled onto the pool's nodes only, and explicit requests
(subtracted from the worker's room). The config's selectors and fields are those of the project's
README at that tag ("Configuration", "Devices Selectors"): `resourcePrefix` and `resourceName` make
the resource name, `rdmaHcaMax` how many pods may share the devices, `selectors` which devices.
"""

from __future__ import annotations

import json
from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from .charts import RDMA_DEVICE_PLUGIN_REQUESTS, requests
from .scheduling import node_affinity, tolerations

RDMA_PLUGIN_IMAGE = "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
RDMA_PLUGIN_NAMESPACE = "kube-system"
# ConnectX HCAs (mlx5_*) are Mellanox/NVIDIA devices: PCI vendor 15b3, kernel driver mlx5_core.
_MELLANOX = {"vendors": ["15b3"], "drivers": ["mlx5_core"]}
# The netdev link type of the fabric's ports: Ethernet for RoCE, InfiniBand for IB.
_LINK_TYPES = {"roce": "ether", "infiniband": "infiniband"}


class RdmaConfigError(ValueError):
    """A pool whose HCAs the plugin's selectors cannot describe."""


def rdma_pools(env: Environment) -> list[Pool]:
    """The pools asking the stack to install the plugin."""
    return [p for p in env.pools if p.existing is not None and p.existing.install_rdma_device_plugin]


def plugin_config(pools: list[Pool]) -> dict[str, Any]:
    """One resource per pool fabric resource (`rdma/roce` → prefix rdma, name roce), selecting its HCAs."""
    resources: dict[str, dict[str, Any]] = {}
    for pool in pools:
        fabric = pool.fabric
        if fabric.resource is None or "/" not in fabric.resource:
            raise RdmaConfigError(f"pool {pool.name}: the RDMA plugin advertises `fabric.resource` such as rdma/roce")
        if fabric.kind not in _LINK_TYPES:
            raise RdmaConfigError(f"pool {pool.name}: the RDMA plugin serves roce or infiniband, not {fabric.kind}")
        if not all(h.startswith("mlx5_") for h in fabric.hcas):
            raise RdmaConfigError(f"pool {pool.name}: only ConnectX (mlx5_*) HCAs are known, got {fabric.hcas}")
        prefix, name = fabric.resource.split("/", 1)
        resources[fabric.resource] = {
            "resourcePrefix": prefix,
            "resourceName": name,
            # Every pod on the node may share the HCAs; the worker is alone on its node anyway.
            "rdmaHcaMax": max(fabric.devices_per_node, 1) * 8,
            "selectors": {**_MELLANOX, "linkTypes": [_LINK_TYPES[fabric.kind]]},
        }
    return {"periodicUpdateInterval": 300, "configList": list(resources.values())}


def rdma_device_plugin_objects(env: Environment) -> list[dict[str, Any]]:
    """The plugin's ConfigMap and DaemonSet, or nothing when no pool asks for it."""
    pools = rdma_pools(env)
    if not pools:
        return []
    labels = {"app.kubernetes.io/name": "rdma-shared-device-plugin", "app.kubernetes.io/managed-by": "grpo-infra"}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "rdma-devices", "namespace": RDMA_PLUGIN_NAMESPACE, "labels": labels},
        "data": {"config.json": json.dumps(plugin_config(pools), indent=2, sort_keys=True)},
    }
    host = [
        ("device-plugin", "/var/lib/kubelet/device-plugins"),
        ("plugins-registry", "/var/lib/kubelet/plugins_registry"),
        ("devs", "/dev/"),
    ]
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "rdma-shared-dp-ds", "namespace": RDMA_PLUGIN_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "rdma-shared-device-plugin"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "affinity": node_affinity(pools),
                    "tolerations": tolerations(pools),
                    "containers": [
                        {
                            "name": "k8s-rdma-shared-dp-ds",
                            "image": RDMA_PLUGIN_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "securityContext": {"privileged": True},
                            "resources": requests(*RDMA_DEVICE_PLUGIN_REQUESTS),
                            "volumeMounts": [
                                *({"name": n, "mountPath": p} for n, p in host),
                                {"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin"},
                            ],
                        }
                    ],
                    "volumes": [
                        *({"name": n, "hostPath": {"path": p}} for n, p in host),
                        {
                            "name": "config",
                            "configMap": {
                                "name": "rdma-devices",
                                "items": [{"key": "config.json", "path": "config.json"}],
                            },
                        },
                    ],
                },
            },
        },
    }
    return [config, daemonset]
