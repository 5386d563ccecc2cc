"""Kueue's manager configuration: complete, v1beta2 field names only, gang-friendly settings."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from grpo_infra.k8s import helm_releases
from grpo_infra.k8s.operators import BUNDLED_CHARTS, KUBERAY_NAMESPACE, KUEUE_NAMESPACE, chart_path
from grpo_infra.launchers.skypilot import kueue_pod_config

from .conftest import K8S_STACKS, env_of

# The v1beta2 `Configuration` fields we use, as read from Kueue's apis/config/v1beta2/configuration_types.go
# (JSON tags) and the 0.19 chart's default config. `None` marks a free-form map (keys are data, not fields).
V1BETA2_FIELDS: dict[str, Any] = {
    "apiVersion": {},
    "kind": {},
    "namespace": {},
    "manageJobsWithoutQueueName": {},
    "managedJobsNamespaceSelector": None,
    "health": {"healthProbeBindAddress": {}, "readinessEndpointName": {}, "livenessEndpointName": {}},
    "metrics": {"bindAddress": {}, "enableClusterQueueResources": {}},
    "webhook": {"port": {}, "host": {}, "certDir": {}},
    "leaderElection": {"leaderElect": {}, "resourceName": {}, "resourceNamespace": {}, "resourceLock": {}},
    "controller": {"groupKindConcurrency": None, "cacheSyncTimeout": {}},
    "clientConnection": {"qps": {}, "burst": {}},
    "waitForPodsReady": {
        "timeout": {},
        "blockAdmission": {},
        "recoveryTimeout": {},
        "requeuingStrategy": {
            "timestamp": {},
            "backoffLimitCount": {},
            "backoffBaseSeconds": {},
            "backoffMaxSeconds": {},
        },
    },
    "integrations": {"frameworks": {}, "externalFrameworks": {}, "labelKeysToCopy": {}},
    "featureGates": None,
}


def _unknown(config: dict[str, Any], allowed: dict[str, Any], path: str = "") -> list[str]:
    out = []
    for key, value in config.items():
        where = f"{path}.{key}" if path else key
        if key not in allowed:
            out.append(where)
        elif allowed[key] and isinstance(value, dict):
            out += _unknown(value, allowed[key], where)
    return out


def _config(stack: str) -> dict[str, Any]:
    kueue = next(r for r in helm_releases(env_of(stack)) if r["name"] == "kueue")
    return yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_manager_config_uses_only_v1beta2_fields(stack: str) -> None:
    config = _config(stack)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    assert _unknown(config, V1BETA2_FIELDS) == []


def test_the_field_check_catches_v1beta1_enable() -> None:
    config = _config("eks-prod")
    config["waitForPodsReady"]["enable"] = True
    assert _unknown(config, V1BETA2_FIELDS) == ["waitForPodsReady.enable"]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_manager_config_is_complete_and_gang_friendly(stack: str) -> None:
    config = _config(stack)
    # The chart replaces its default string whole: what the manager needs to serve must be here.
    assert config["health"]["healthProbeBindAddress"] and config["webhook"]["port"] == 9443
    assert config["leaderElection"]["leaderElect"] is True
    wait = config["waitForPodsReady"]
    assert "enable" not in wait
    assert wait["blockAdmission"] is True
    minutes = int(wait["timeout"].removesuffix("m"))
    assert minutes >= 15, "too short to pull a multi-GB verl image onto cold nodes"
    assert minutes == env_of(stack).kubernetes.pods_ready_timeout_minutes
    assert set(wait["requeuingStrategy"]) == {
        "timestamp",
        "backoffLimitCount",
        "backoffBaseSeconds",
        "backoffMaxSeconds",
    }
    assert wait["requeuingStrategy"]["timestamp"] in ("Eviction", "Creation")
    assert {"ray.io/rayjob", "ray.io/raycluster"} <= set(config["integrations"]["frameworks"])


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_releases_are_pinned(stack: str) -> None:
    releases = {r["name"]: r for r in helm_releases(env_of(stack))}
    kuberay, kueue = releases["kuberay-operator"], releases["kueue"]
    bundled = env_of(stack).kubernetes.operator_charts == "bundled"
    # A bundled chart is named by its place in the project (the same bytes on every machine); Pulumi installs
    # the file on this one.
    chart = "grpo_infra/k8s/charts/kuberay-operator-1.6.2.tgz" if bundled else "kuberay-operator"
    assert (kuberay["chart"], kuberay["version"]) == (chart, "1.6.2")
    if bundled:
        assert chart_path(kuberay["chart"]) == str(BUNDLED_CHARTS / "kuberay-operator-1.6.2.tgz")
    assert kuberay["repository"] == (None if bundled else "https://ray-project.github.io/kuberay-helm/")
    assert kuberay["namespace"] != kueue["namespace"]
    assert kuberay["values"]["batchScheduler"]["name"] == ""  # Kueue works through suspend
    assert kuberay["values"]["image"]["tag"] == "v1.6.2"
    kueue_chart = "grpo_infra/k8s/charts/kueue-0.19.2.tgz" if bundled else "oci://registry.k8s.io/kueue/charts/kueue"
    assert (kueue["chart"], kueue["version"]) == (kueue_chart, "0.19.2")
    assert chart_path(kueue["chart"]) == (str(BUNDLED_CHARTS / "kueue-0.19.2.tgz") if bundled else kueue_chart)


def _selects(selector: dict[str, Any], namespace: str) -> bool:
    """A label selector's `matchExpressions` (In/NotIn) on a namespace's `kubernetes.io/metadata.name`."""
    labels = {"kubernetes.io/metadata.name": namespace}
    for expr in selector["matchExpressions"]:
        present = labels.get(expr["key"]) in expr["values"]
        if present != {"In": True, "NotIn": False}[expr["operator"]]:
            return False
    return True


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_a_pod_carrying_a_queue_label_is_queued_by_kueue(stack: str) -> None:
    """SkyPilot's pods on the stack's cluster carry the tenant's queue label; Kueue reads a plain pod's label
    only with its `pod` integration, which a listed `frameworks` leaves out unless named (Kueue v0.19.2
    docs/tasks/run/plain_pods.md): otherwise SkyPilot runs beside the quota on the same GPUs."""
    env = env_of(stack)
    labelled = env.launchers is not None and env.launchers.skypilot is not None and kueue_pod_config(env) is not None
    assert ("pod" in _config(stack)["integrations"]["frameworks"]) == labelled


def test_the_pod_integration_reaches_the_tenant_namespaces_only() -> None:
    """Kueue's pod webhook sees every pod where `managedJobsNamespaceSelector` selects: the tenants' pods,
    never kube-system's or the operators' (which it would gate or, with Kueue down, refuse)."""
    env = env_of("gke-dev")
    config = _config("gke-dev")
    assert "pod" in config["integrations"]["frameworks"], "gke-dev runs SkyPilot on its own cluster"
    selector = config["managedJobsNamespaceSelector"]
    tenants = [t.name for t in env.tenants]
    assert all(_selects(selector, ns) for ns in tenants)
    for other in ("kube-system", KUEUE_NAMESPACE, KUBERAY_NAMESPACE, "default", "monitoring"):
        assert not _selects(selector, other), other
    # Even a tenant named like one: the operators' namespaces as grpo_infra.k8s.operators installs them.
    excluded = next(e["values"] for e in selector["matchExpressions"] if e["operator"] == "NotIn")
    assert {"kube-system", KUEUE_NAMESPACE, KUBERAY_NAMESPACE} <= set(excluded)


@pytest.mark.parametrize("stack", ["eks-prod", "onprem-k8s", "local-k8s"])
def test_without_labelled_pods_kueue_keeps_to_the_ray_and_job_kinds(stack: str) -> None:
    config = _config(stack)
    assert "pod" not in config["integrations"]["frameworks"] and "managedJobsNamespaceSelector" not in config
