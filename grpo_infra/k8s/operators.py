"""The operators, as pinned Helm releases: KubeRay always, Kueue unless Volcano schedules the gangs.

Each chart comes from its upstream source (`upstream`: KubeRay's Helm repository, Kueue's OCI
registry) or from the project's own copy of the same chart version (`bundled`:
grpo_infra/k8s/charts/, origin and sha256 in its README.md), for clusters that reach neither
(air-gapped ones, and the local cluster of `grpo-infra kube up`). Either way the release, its values
and the image references are the same.

A bundled chart is rendered by its place in the project (`grpo_infra/k8s/charts/<file>`), never by the
absolute path of wherever the package happens to be installed: `synth` output is the same bytes on every
machine and in every checkout, so it can be kept and diffed. The Pulumi component turns that reference into
the file on this machine when it registers the release (`chart_path`).

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


# The chart's own `featureGates` list (kuberay-operator 1.6.2 values.yaml): a Helm list value replaces the
# chart's whole, so a changed gate is given with all the others as the chart has them.
_CHART_GATES = (
    ("RayClusterStatusConditions", True),
    ("RayJobDeletionPolicy", True),
    ("RayMultiHostIndexing", True),
    ("RayServiceIncrementalUpgrade", False),
    ("RayCronJob", False),
)


def kuberay_feature_gates(cron: bool) -> list[dict[str, object]]:
    """The chart's feature gates, with RayCronJob on when the stack runs one."""
    return [{"name": n, "enabled": cron if n == "RayCronJob" else on} for n, on in _CHART_GATES]


# How long an operator's pod stays bound to a node that stopped answering before Kubernetes evicts it and its
# Deployment starts it on a live node. Without a toleration of its own, the API server gives every pod 300 s
# (the DefaultTolerationSeconds admission plugin, kubernetes v1.36.3
# plugin/pkg/admission/defaulttolerationseconds/admission.go, which adds its default only where the pod
# tolerates neither taint; "Taint based Evictions" in the Kubernetes docs): an operator on the Ray head's node
# then sleeps 5 minutes with the head, and nothing retries the gang's failed attempt meanwhile
# (docs/rehearsal.md, the head-node drill). Both operators hold no state of their own (the API server does).
OPERATOR_NODE_LOSS_S = 30
_NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def operator_tolerations() -> list[dict[str, object]]:
    """The operators' pods leave a lost node `OPERATOR_NODE_LOSS_S` after Kubernetes marks it, not 300 s."""
    return [
        {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": OPERATOR_NODE_LOSS_S}
        for taint in _NODE_LOSS_TAINTS
    ]


def kuberay_image() -> str:
    """The operator image the KubeRay release runs (what the local cluster's nodes are loaded with)."""
    return f"{KUBERAY_IMAGE}:v{KUBERAY_VERSION}"


def kueue_image() -> str:
    """The manager image the Kueue release runs."""
    return f"{KUEUE_IMAGE}:v{KUEUE_VERSION}"


# How rendered output names a bundled chart: its path inside the project, the same on every machine.
BUNDLED_REFERENCE = "grpo_infra/k8s/charts/"


def bundled_chart(file_name: str) -> str:
    """The absolute path of a bundled chart, checked against its recorded sha256 (a changed copy is refused)."""
    path = BUNDLED_CHARTS / file_name
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    if digest != BUNDLED_SHA256[file_name]:
        raise ValueError(
            f"{path}: missing or not the recorded chart (sha256 {digest}, expected {BUNDLED_SHA256[file_name]})"
        )
    return str(path)


def bundled_reference(file_name: str) -> str:
    """A bundled chart as rendered output names it (checked against its recorded sha256 like `bundled_chart`)."""
    bundled_chart(file_name)
    return BUNDLED_REFERENCE + file_name


def chart_path(chart: str) -> str:
    """What Helm installs for a rendered release's `chart`: a bundled chart's file on this machine (resolved when
    the release is registered, so the rendered reference stays machine-independent), else the chart unchanged."""
    if chart.startswith(BUNDLED_REFERENCE):
        return bundled_chart(chart.removeprefix(BUNDLED_REFERENCE))
    return chart


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
        "chart": bundled_reference(f"{KUBERAY_CHART}-{KUBERAY_VERSION}.tgz") if bundled else KUBERAY_CHART,
        "repository": None if bundled else KUBERAY_REPOSITORY,
        "version": KUBERAY_VERSION,
        "namespace": KUBERAY_NAMESPACE,
        "values": {
            "image": {"repository": KUBERAY_IMAGE, "tag": f"v{KUBERAY_VERSION}", "pullPolicy": "IfNotPresent"},
            "batchScheduler": {"name": scheduler},
            "tolerations": operator_tolerations(),
            # `job.kind: raycronjob`: KubeRay's RayCronJob controller is alpha, off unless its gate is on
            # (ray-operator v1.6.2 pkg/features/features.go; `grpo_infra.k8s.raycronjob`).
            **({"featureGates": kuberay_feature_gates(cron=True)} if env.job.kind == "raycronjob" else {}),
        },
    }


def kueue_release(env: Environment) -> dict[str, Any]:
    """Kueue's OCI chart (no separate repository: the chart reference is the OCI address)."""
    bundled = _bundled(env)
    return {
        "name": "kueue",
        "chart": bundled_reference(f"kueue-{KUEUE_VERSION}.tgz") if bundled else KUEUE_CHART,
        "repository": None,
        "version": KUEUE_VERSION,
        "namespace": KUEUE_NAMESPACE,
        "values": {
            "controllerManager": {
                "manager": {
                    "image": {"repository": KUEUE_IMAGE, "tag": f"v{KUEUE_VERSION}", "pullPolicy": "IfNotPresent"}
                },
                "tolerations": operator_tolerations(),
            },
            "managerConfig": {"controllerManagerConfigYaml": manager_config_yaml(env)},
        },
    }


# Kueue 0.19.2's two aggregated ClusterRoles (chart templates/rbac/batch_user_role.yaml, batch_admin_role.yaml),
# named after the release, with the label each gathers its rules from.
KUEUE_AGGREGATED_ROLES = {
    "kueue-batch-user-role": "rbac.kueue.x-k8s.io/batch-user",
    "kueue-batch-admin-role": "rbac.kueue.x-k8s.io/batch-admin",
}


def kueue_role_patches() -> list[dict[str, Any]]:
    """Kueue's aggregated ClusterRoles, their `aggregationRule` taken over by a server-side patch, so that
    `pulumi destroy` drops the rule before Helm uninstalls the chart.

    Why: kube-controller-manager's aggregation controller re-aggregates every role with an aggregation rule
    on any ClusterRole event, reading its cache, and writes with a forced apply, which creates a role that is
    gone (k8s.io/kubernetes v1.36.3 pkg/controller/clusterroleaggregation `syncClusterRole`,
    `applyClusterRoles`). Helm deletes the aggregated role and then its ~45 labelled roles; a sync that reads
    the cache before it saw the deletion makes the role again, without labels, and Helm's uninstall waits for
    it by name until its timeout (helm v3.18.6 pkg/kube/wait.go `waitForDeletedResources`): `pulumi destroy`
    failed with "context deadline exceeded" after 5 min, twice out of two on the local cluster. A role
    without an aggregation rule is never queued (`enqueue`) nor written, so once the patch is removed (the
    provider releases the fields it owns, pulumi-kubernetes pkg/ssa `Relinquish`) the race is gone.

    The patch spells the chart's selector as the equal `matchExpressions` form: an equal value would be
    shared with Helm's field manager and kept when the patch lets go; a different spelling is taken over
    (`pulumi.com/patchForce`), owned by the patch alone, and removed with it."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "annotations": {"pulumi.com/patchForce": "true"}},
            "aggregationRule": {
                "clusterRoleSelectors": [{"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}]}]
            },
        }
        for name, label in KUEUE_AGGREGATED_ROLES.items()
    ]


def helm_releases(env: Environment) -> list[dict[str, Any]]:
    """Every Helm release the stack installs, in install order."""
    releases = [kuberay_release(env)]
    if uses_kueue(env):
        releases.append(kueue_release(env))
    return releases
