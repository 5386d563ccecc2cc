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
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": REQUEUE_LIMIT,
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 3600,
            },
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


def manager_config_yaml(env: Environment) -> str:
    """The string for the chart's `managerConfig.controllerManagerConfigYaml`."""
    return dump_yaml(manager_config(env))
