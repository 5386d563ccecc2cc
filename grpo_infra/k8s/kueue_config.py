"""Kueue's manager configuration (`config.kueue.x-k8s.io/v1beta2`), complete.

The chart replaces its whole default configuration with this string and Kueue parses it strictly,
so it carries every setting the manager needs, not only the ones we change. Field names are those of
Kueue 0.19's v1beta2 `Configuration` type; there is no `waitForPodsReady.enable` in v1beta2.
"""

from __future__ import annotations

from typing import Any

from ..manifests import dump_yaml
from ..spec import Environment

API_VERSION = "config.kueue.x-k8s.io/v1beta2"
# Workload kinds Kueue admits here: the RayJob (and the RayCluster it owns), and plain Jobs.
FRAMEWORKS = ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]
# Requeue an evicted gang at most this many times, then deactivate it for a human to look at.
REQUEUE_LIMIT = 5
# Kueue's plain-Pod integration: what makes a pod's own `kueue.x-k8s.io/queue-name` label count against the
# quota (Kueue v0.19.2 site/content/en/docs/tasks/run/plain_pods.md). Listing `frameworks` replaces Kueue's
# defaults, so without it a labelled pod is left alone and runs outside the quota.
POD_FRAMEWORK = "pod"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
# Never Kueue's to gate, even if a tenant took the name: kube-system and the operators' namespaces (those of
# grpo_infra.k8s.operators, which imports this module; tests/k8s/test_kueue_config.py holds them equal).
SYSTEM_NAMESPACES = ("kube-system", "kueue-system", "kuberay-system")


def manager_config(env: Environment) -> dict[str, Any]:
    """The Configuration object, as a dict."""
    assert env.kubernetes is not None
    return {
        "apiVersion": API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        # The chart's lease name: keep it, so an upgrade never runs two leaders.
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        # Only jobs that name a LocalQueue are Kueue's; everything else in the cluster is left alone.
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": {
            # For a RayJob "ready" means its RayCluster is ready: every node has pulled the verl image.
            "timeout": f"{env.kubernetes.pods_ready_timeout_minutes}m",
            # All-or-nothing: admit the next gang only once this one runs, so two half-started gangs
            # never hold each other's GPUs. Cluster-wide: one stuck gang holds every tenant's admissions
            # for up to `timeout` (docs/kubernetes.md, "Admission while a gang starts").
            "blockAdmission": env.kubernetes.block_admission,
            # A gang that ran and is not ready again (a KubeRay retry's new Ray cluster waiting for a lost
            # node's replacement) is evicted whole and requeued after this long; v1beta2 defaults it to
            # `timeout` (sigs.k8s.io/kueue v0.17.0 apis/config/v1beta2/configuration_types.go:288-296).
            # docs/kubernetes.md, "When a node is lost".
            "recoveryTimeout": f"{env.kubernetes.recovery_timeout()}m",
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": REQUEUE_LIMIT,
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 3600,
            },
        },
        "integrations": {"frameworks": [*FRAMEWORKS, *([POD_FRAMEWORK] if plain_pods_queued(env) else [])]},
        **({"managedJobsNamespaceSelector": tenant_namespace_selector(env)} if plain_pods_queued(env) else {}),
    }


def plain_pods_queued(env: Environment) -> bool:
    """Does a launcher create plain pods on this cluster that carry a tenant's queue label? SkyPilot on the
    stack's own cluster does (`grpo_infra.launchers.skypilot.kueue_pod_config`, the same condition)."""
    sky = env.launchers.skypilot if env.launchers is not None else None
    return sky is not None and sky.infra.startswith("k8s")


def tenant_namespace_selector(env: Environment) -> dict[str, Any]:
    """Only the tenant namespaces, never kube-system or the operators': with the `pod` integration Kueue's
    pod webhook sees every pod created where this selects, and gates those with a queue label
    (`managedJobsNamespaceSelector`, Kueue v0.19.2 apis/config/v1beta2/configuration_types.go; its default
    leaves out only kube-system and Kueue's namespace, apis/config/v1beta2/defaults.go). The Kueue chart
    gives its webhooks this selector too (charts/kueue/templates/webhook/manifests.yaml)."""
    return {
        "matchExpressions": [
            {"key": NAMESPACE_LABEL, "operator": "In", "values": sorted(t.name for t in env.tenants)},
            {
                "key": NAMESPACE_LABEL,
                "operator": "NotIn",
                "values": list(SYSTEM_NAMESPACES),
            },
        ]
    }


def manager_config_yaml(env: Environment) -> str:
    """The string for the chart's `managerConfig.controllerManagerConfigYaml`."""
    return dump_yaml(manager_config(env))
