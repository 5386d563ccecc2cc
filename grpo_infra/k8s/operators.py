"""The operators, as pinned Helm releases: KubeRay always, Kueue unless Volcano schedules the gangs."""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from .kueue_config import manager_config_yaml

KUBERAY_CHART = "kuberay-operator"
KUBERAY_VERSION = "1.7.0"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_NAMESPACE = "kuberay-system"

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.19.2"
KUEUE_NAMESPACE = "kueue-system"


def uses_kueue(env: Environment) -> bool:
    assert env.kubernetes is not None
    return env.kubernetes.scheduler == "kueue"


def kuberay_release(env: Environment) -> dict[str, Any]:
    """KubeRay's operator chart. Under Kueue no batch scheduler is set: Kueue works through `suspend`."""
    assert env.kubernetes is not None
    scheduler = "volcano" if env.kubernetes.scheduler == "volcano" else ""
    return {
        "name": "kuberay-operator",
        "chart": KUBERAY_CHART,
        "repository": KUBERAY_REPOSITORY,
        "version": KUBERAY_VERSION,
        "namespace": KUBERAY_NAMESPACE,
        "values": {
            "image": {"repository": "quay.io/kuberay/operator", "tag": f"v{KUBERAY_VERSION}"},
            "batchScheduler": {"name": scheduler},
        },
    }


def kueue_release(env: Environment) -> dict[str, Any]:
    """Kueue's OCI chart (no separate repository: the chart reference is the OCI address)."""
    return {
        "name": "kueue",
        "chart": KUEUE_CHART,
        "repository": None,
        "version": KUEUE_VERSION,
        "namespace": KUEUE_NAMESPACE,
        "values": {
            "controllerManager": {
                "manager": {
                    "image": {
                        "repository": "registry.k8s.io/kueue/kueue",
                        "tag": f"v{KUEUE_VERSION}",
                        "pullPolicy": "IfNotPresent",
                    }
                }
            },
            "managerConfig": {"controllerManagerConfigYaml": manager_config_yaml(env)},
        },
    }


def helm_releases(env: Environment) -> list[dict[str, Any]]:
    """Every Helm release the stack installs, in install order."""
    releases = [kuberay_release(env)]
    if uses_kueue(env):
        releases.append(kueue_release(env))
    return releases
