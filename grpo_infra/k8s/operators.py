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


# The chart's own `featureGates` list (kuberay-operator 1.7.0 values.yaml): a Helm list value replaces the
# chart's whole, so a changed gate is given with all the others as the chart has them.
_CHART_GATES = (
    ("RayClusterStatusConditions", True),
    ("RayJobDeletionPolicy", True),
    ("RayMultiHostIndexing", True),
    ("RayServiceIncrementalUpgrade", True),
    ("RayCronJob", False),
    ("RayClusterMTLS", False),
    ("RayClusterNetworkPolicy", False),
    ("RayClusterHistoryServer", False),
)


def kuberay_feature_gates(cron: bool) -> list[dict[str, object]]:
    """The chart's feature gates, with RayCronJob on when the stack runs one."""
    return [{"name": n, "enabled": cron if n == "RayCronJob" else on} for n, on in _CHART_GATES]


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
            # `job.kind: raycronjob`: KubeRay's RayCronJob controller is alpha, off unless its gate is on
            # (ray-operator v1.7.0 pkg/features/features.go; `grpo_infra.k8s.raycronjob`).
            **({"featureGates": kuberay_feature_gates(cron=True)} if env.job.kind == "raycronjob" else {}),
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
