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
        {"affinity": node_affinity(pools), "tolerations": tolerations(pools)},
    )


def efa_device_plugin(pools: list[Pool]) -> dict[str, Any]:
    """The EFA device plugin (advertises vpc.amazonaws.com/efa); it tolerates the pools' taints."""
    return _release("aws-efa-k8s-device-plugin", "kube-system", EFA_DEVICE_PLUGIN, {"tolerations": tolerations(pools)})


def gpu_operator(pools: list[Pool], install_driver: bool) -> dict[str, Any]:
    """The NVIDIA GPU operator; its daemonsets and node-feature-discovery tolerate the pools' taints."""
    tolerate = tolerations(pools)
    return _release(
        "gpu-operator",
        "gpu-operator",
        GPU_OPERATOR,
        {
            "driver": {"enabled": install_driver},
            "daemonsets": {"tolerations": tolerate},
            "node-feature-discovery": {"worker": {"tolerations": tolerate}},
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
