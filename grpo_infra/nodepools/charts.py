"""Helm releases that make a pool's GPUs and fabric schedulable, with their charts pinned.

A release is a plain dict: name, namespace, chart, version, repository, values. The Pulumi layer turns
each into a `kubernetes:helm.sh/v3:Release`.
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from .scheduling import node_affinity, tolerations

# Pinned charts: (repository, chart, version).
NVIDIA_DEVICE_PLUGIN = ("https://nvidia.github.io/k8s-device-plugin", "nvidia-device-plugin", "0.17.2")
EFA_DEVICE_PLUGIN = ("https://aws.github.io/eks-charts", "aws-efa-k8s-device-plugin", "v0.5.7")
GPU_OPERATOR = ("https://helm.ngc.nvidia.com/nvidia", "gpu-operator", "v25.3.0")

# What each DaemonSet pod the stack installs requests on every node it runs on, (millicores, MiB). The
# charts' values set exactly these requests, and a node's room for the worker is its allocatable minus
# their sum (`grpo_infra.k8s.placement.node_share`), so the worker and the plugins always fit together.
# The EFA chart's own default is 10m / 20Mi (eks-charts, stable/aws-efa-k8s-device-plugin/README.md).
NVIDIA_DEVICE_PLUGIN_REQUESTS = (50, 128)
EFA_DEVICE_PLUGIN_REQUESTS = (10, 20)
RDMA_DEVICE_PLUGIN_REQUESTS = (50, 64)
# GPU operator: one request per DaemonSet it runs on a GPU node (values key → requests).
GPU_OPERATOR_REQUESTS: dict[str, tuple[int, int]] = {
    "toolkit": (50, 128),
    "devicePlugin": (50, 128),
    "dcgmExporter": (100, 256),
    "gfd": (20, 64),
    "validator": (20, 64),
    "nodeStatusExporter": (20, 64),
}
GPU_OPERATOR_DRIVER_REQUESTS = (200, 1024)
NFD_WORKER_REQUESTS = (20, 64)


def requests(cpu_milli: int, memory_mi: int) -> dict[str, dict[str, str]]:
    """A container `resources` block requesting (and limited to) exactly this."""
    amount = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"}
    return {"requests": dict(amount), "limits": {"memory": amount["memory"]}}


def _release(name: str, namespace: str, chart: tuple[str, str, str], values: dict[str, Any]) -> dict[str, Any]:
    repository, chart_name, version = chart
    return {
        "name": name,
        "namespace": namespace,
        "createNamespace": namespace != "kube-system",
        "repository": repository,
        "chart": chart_name,
        "version": version,
        "values": values,
    }


def nvidia_device_plugin(pools: list[Pool]) -> dict[str, Any]:
    """The NVIDIA device plugin, scheduled onto exactly these pools' nodes.

    The chart's default affinity wants node-feature-discovery labels, which EKS nodes lack: ours
    replaces it with the pools' own labels.
    """
    return _release(
        "nvidia-device-plugin",
        "nvidia-device-plugin",
        NVIDIA_DEVICE_PLUGIN,
        {
            "affinity": node_affinity(pools),
            "tolerations": tolerations(pools),
            "resources": requests(*NVIDIA_DEVICE_PLUGIN_REQUESTS),
        },
    )


def efa_device_plugin(pools: list[Pool]) -> dict[str, Any]:
    """The EFA device plugin (advertises vpc.amazonaws.com/efa); it tolerates the pools' taints."""
    return _release(
        "aws-efa-k8s-device-plugin",
        "kube-system",
        EFA_DEVICE_PLUGIN,
        {"tolerations": tolerations(pools), "resources": requests(*EFA_DEVICE_PLUGIN_REQUESTS)},
    )


def gpu_operator(pools: list[Pool], install_driver: bool) -> dict[str, Any]:
    """The NVIDIA GPU operator; its daemonsets and node-feature-discovery tolerate the pools' taints."""
    tolerate = tolerations(pools)
    return _release(
        "gpu-operator",
        "gpu-operator",
        GPU_OPERATOR,
        {
            "driver": {"enabled": install_driver, "resources": requests(*GPU_OPERATOR_DRIVER_REQUESTS)},
            "daemonsets": {"tolerations": tolerate},
            "node-feature-discovery": {
                "worker": {"tolerations": tolerate, "resources": requests(*NFD_WORKER_REQUESTS)}
            },
            **{key: {"resources": requests(*amount)} for key, amount in GPU_OPERATOR_REQUESTS.items()},
        },
    )


def device_plugin_releases(env: Environment) -> list[dict[str, Any]]:
    """The releases this environment's platform needs for its pools' GPUs and fabric.

    EKS (AL2023 NVIDIA AMI): the NVIDIA device plugin, and the EFA device plugin for EFA pools.
    GKE: none (GKE runs its own device plugin). Existing: the GPU operator when a pool asks for it.
    """
    assert env.kubernetes is not None
    provider = env.kubernetes.provider
    if provider == "eks":
        releases = [nvidia_device_plugin(env.pools)]
        efa = [p for p in env.pools if p.fabric.kind == "efa"]
        if efa:
            releases.append(efa_device_plugin(efa))
        return releases
    if provider == "existing":
        asking = [p for p in env.pools if p.existing is not None and p.existing.install_gpu_operator]
        if asking:
            install_driver = any(p.existing.operator_installs_driver for p in asking if p.existing)
            return [gpu_operator(asking, install_driver)]
    return []


def daemonset_requests(env: Environment, pool: Pool) -> list[tuple[str, int, int]]:
    """(DaemonSet, millicores, MiB) of every DaemonSet pod this stack puts on each node of `pool`."""
    assert env.kubernetes is not None
    provider, out = env.kubernetes.provider, []
    if provider == "eks":
        out.append(("nvidia-device-plugin", *NVIDIA_DEVICE_PLUGIN_REQUESTS))
        if pool.fabric.kind == "efa":
            out.append(("aws-efa-k8s-device-plugin", *EFA_DEVICE_PLUGIN_REQUESTS))
    if provider == "existing" and pool.existing is not None:
        if pool.existing.install_gpu_operator:
            out += [(f"gpu-operator {key}", *amount) for key, amount in GPU_OPERATOR_REQUESTS.items()]
            out.append(("node-feature-discovery worker", *NFD_WORKER_REQUESTS))
            if any(
                p.existing.operator_installs_driver for p in env.pools if p.existing and p.existing.install_gpu_operator
            ):
                out.append(("gpu-operator driver", *GPU_OPERATOR_DRIVER_REQUESTS))
        if pool.existing.install_rdma_device_plugin:
            out.append(("rdma-shared-device-plugin", *RDMA_DEVICE_PLUGIN_REQUESTS))
    return out
