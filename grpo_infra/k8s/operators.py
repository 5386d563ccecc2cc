"""The operators, as pinned Helm releases: KubeRay always, Kueue unless Volcano schedules the gangs.

Each chart comes from its upstream source (`upstream`: KubeRay's Helm repository, Kueue's OCI
registry) or from the project's own copy of the same chart version (`bundled`:
grpo_infra/k8s/charts/, origin and sha256 in its README.md), for clusters that reach neither
(air-gapped ones, and the local cluster of `grpo-infra kube up`). Either way the release, its values
and the image references are the same.

KubeRay is pinned at 1.6.2, the version every real test here runs (docs/kubernetes.md, "Which
KubeRay"): chart, CRDs and operator binary from the same tag.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..spec import Environment
from .kueue_config import manager_config_yaml

KUBERAY_CHART = "kuberay-operator"
KUBERAY_VERSION = "1.6.2"
KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_NAMESPACE = "kuberay-system"
KUBERAY_IMAGE = "quay.io/kuberay/operator"

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.19.2"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_IMAGE = "registry.k8s.io/kueue/kueue"

# The project's copies of the two charts, `helm package` layout (README.md there: origin, sha256).
BUNDLED_CHARTS = Path(__file__).with_name("charts")
BUNDLED_SHA256 = {
    f"kuberay-operator-{KUBERAY_VERSION}.tgz": "551d9fc85418e3de32d24669c2bbc01d1bdf6252ebc2b24768ffd02a0e8c955c",
    f"kueue-{KUEUE_VERSION}.tgz": "0594861aa894f8b0d3b0f5d43e47021af27bca08de0f8d67309d55bdfe0f680d",
}


def uses_kueue(env: Environment) -> bool:
    assert env.kubernetes is not None
    return env.kubernetes.scheduler == "kueue"


def kuberay_image() -> str:
    """The operator image the KubeRay release runs (what the local cluster's nodes are loaded with)."""
    return f"{KUBERAY_IMAGE}:v{KUBERAY_VERSION}"


def kueue_image() -> str:
    """The manager image the Kueue release runs."""
    return f"{KUEUE_IMAGE}:v{KUEUE_VERSION}"


def bundled_chart(file_name: str) -> str:
    """The absolute path of a bundled chart, checked against its recorded sha256 (a changed copy is refused)."""
    path = BUNDLED_CHARTS / file_name
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    if digest != BUNDLED_SHA256[file_name]:
        raise ValueError(
            f"{path}: missing or not the recorded chart (sha256 {digest}, expected {BUNDLED_SHA256[file_name]})"
        )
    return str(path)


def _bundled(env: Environment) -> bool:
    assert env.kubernetes is not None
    return env.kubernetes.operator_charts == "bundled"


def kuberay_release(env: Environment) -> dict[str, Any]:
    """KubeRay's operator chart. Under Kueue no batch scheduler is set: Kueue works through `suspend`."""
    assert env.kubernetes is not None
    scheduler = "volcano" if env.kubernetes.scheduler == "volcano" else ""
    bundled = _bundled(env)
    return {
        "name": "kuberay-operator",
        "chart": bundled_chart(f"{KUBERAY_CHART}-{KUBERAY_VERSION}.tgz") if bundled else KUBERAY_CHART,
        "repository": None if bundled else KUBERAY_REPOSITORY,
        "version": KUBERAY_VERSION,
        "namespace": KUBERAY_NAMESPACE,
        "values": {
            "image": {"repository": KUBERAY_IMAGE, "tag": f"v{KUBERAY_VERSION}", "pullPolicy": "IfNotPresent"},
            "batchScheduler": {"name": scheduler},
        },
    }


def kueue_release(env: Environment) -> dict[str, Any]:
    """Kueue's OCI chart (no separate repository: the chart reference is the OCI address)."""
    bundled = _bundled(env)
    return {
        "name": "kueue",
        "chart": bundled_chart(f"kueue-{KUEUE_VERSION}.tgz") if bundled else KUEUE_CHART,
        "repository": None,
        "version": KUEUE_VERSION,
        "namespace": KUEUE_NAMESPACE,
        "values": {
            "controllerManager": {
                "manager": {
                    "image": {"repository": KUEUE_IMAGE, "tag": f"v{KUEUE_VERSION}", "pullPolicy": "IfNotPresent"}
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
