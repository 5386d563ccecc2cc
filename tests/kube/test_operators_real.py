"""The operators from their Helm charts on real nodes, as on a cloud stack: `grpo-infra kube up --operators
charts` starts no operator and applies no CRD; `grpo-infra up local-k8s --wait` installs KubeRay 1.6.2 and
Kueue 0.19.2 from the bundled charts (grpo_infra/k8s/charts/), whose images were made here from the
binaries built from Go modules and loaded into every node under the references the charts name (nothing is
pulled). The operators run as pods: they reach the API server in-cluster (the `kubernetes` Service), the
API server calls Kueue's webhooks and proxies to its visibility API; the gang is admitted and the RayJob
SUCCEEDS. `grpo-infra destroy local-k8s` then removes the charts with everything else, in time, but for
KubeRay's CRDs, which Helm never deletes.

Needs root, the real-node packages and the built kubelet; the images are built here (cached by content)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.k8s.operators import (
    KUBERAY_CHART,
    KUBERAY_NAMESPACE,
    KUBERAY_VERSION,
    KUEUE_NAMESPACE,
    OPERATOR_NODE_LOSS_S,
    bundled_chart,
    kuberay_image,
    kueue_image,
)
from grpo_infra.k8s.queues import cluster_queue_name
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import Paths

from .conftest import ROOT, LocalClusters, get
from .test_job_real import CLI, CPU_NODES, ENV, TENANT, as_the_readme, job_cluster

pytestmark = pytest.mark.cluster
OPERATORS = {KUEUE_NAMESPACE: kueue_image(), KUBERAY_NAMESPACE: kuberay_image()}


@pytest.fixture(scope="module")
def kube(local_clusters: LocalClusters) -> Paths:
    return job_cluster(local_clusters, operators="charts")


def kuberay_chart_crds() -> list[str]:
    """The CRDs in the bundled KubeRay chart's `crds/` folder."""
    with tarfile.open(bundled_chart(f"{KUBERAY_CHART}-{KUBERAY_VERSION}.tgz")) as chart:
        return [
            yaml.safe_load(chart.extractfile(m).read())["metadata"]["name"]  # type: ignore[union-attr]
            for m in chart.getmembers()
            if m.isfile() and m.name.startswith(f"{KUBERAY_CHART}/crds/")
        ]


def names(paths: Paths, *kinds: str) -> list[str]:
    out = cluster.kubectl(paths, "get", ",".join(kinds), "-A", "-o", "name", "--ignore-not-found")
    return [n for n in out.split() if "kueue" in n or "kuberay" in n or "ray.io" in n]


def operator_pods(paths: Paths, namespace: str) -> list[dict[str, Any]]:
    found = cluster.kubectl(paths, "get", "namespace", namespace, "--ignore-not-found", "-o", "name").strip()
    return get(paths, "pods", "-n", namespace)["items"] if found else []


def test_the_operators_charts_install_as_on_a_cloud_run_the_job_and_are_destroyed_with_it(
    kube: Paths, tmp_path: Path
) -> None:
    assert names(kube, "crd", "pods") == [], "no operator, no CRD before `grpo-infra up`"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    started = time.monotonic()
    up = subprocess.run(
        as_the_readme(f"{CLI} up local-k8s --wait"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )
    up_seconds = time.monotonic() - started
    out = up.stdout + up.stderr
    print(out[-5000:])
    assert up.returncode == 0, out[-3000:]
    assert f"rayjob {TENANT}/{ENV.job.name} SUCCEEDED" in out
    assert "helm.sh/v3:Release kueue created" in out and "helm.sh/v3:Release kuberay-operator created" in out

    # Each operator a Ready pod of its chart, on a CPU node, from the image made here under the chart's reference.
    for namespace, image in OPERATORS.items():
        [pod] = operator_pods(kube, namespace)
        assert pod["spec"]["nodeName"] in CPU_NODES
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and status["image"] == image and status["containerID"].startswith("containerd://")
        # It leaves a lost node 30 s after Kubernetes marks it, not the 300 s the API server gives a pod that
        # says nothing (the head-node drill, docs/rehearsal.md): the chart's value reached the pod, unchanged.
        lost = {t["key"]: t.get("tolerationSeconds") for t in pod["spec"]["tolerations"] if t["effect"] == "NoExecute"}
        assert lost == {
            "node.kubernetes.io/not-ready": OPERATOR_NODE_LOSS_S,
            "node.kubernetes.io/unreachable": OPERATOR_NODE_LOSS_S,
        }, pod["spec"]["tolerations"]
        release = get(kube, "secrets", "-n", namespace, "-l", "owner=helm")["items"]
        assert [s["metadata"]["labels"]["status"] for s in release] == ["deployed"]
    # The API server proxies to Kueue's visibility API, served by its pod (aggregator routing, front proxy).
    queue = cluster_queue_name(ENV.tenant(TENANT))
    pending = json.loads(
        cluster.kubectl(
            kube, "get", "--raw", f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{queue}/pendingworkloads"
        )
    )
    assert pending["kind"] == "PendingWorkloadsSummary"

    started = time.monotonic()
    destroy = subprocess.run(
        as_the_readme(f"{CLI} destroy local-k8s"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    destroy_seconds = time.monotonic() - started
    assert destroy.returncode == 0, (destroy.stdout + destroy.stderr)[-3000:]
    # Nothing of either chart is left but KubeRay's CRDs: Helm installs a chart's `crds/` folder and never
    # deletes it (Helm's CRD rules), so another team's RayJobs on a shared cluster survive; Kueue's CRDs are
    # templates of its chart and go with it. No Ray object is left in them.
    left = names(
        kube,
        "crd",
        "pods",
        "clusterroles",
        "clusterrolebindings",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "apiservices",
    )
    kept = [f"customresourcedefinition.apiextensions.k8s.io/{name}" for name in kuberay_chart_crds()]
    assert sorted(n for n in left if not n.startswith("apiservice.apiregistration.k8s.io/v1")) == sorted(kept), left
    assert [n for n in left if n.startswith("apiservice") and not n.endswith(".ray.io")] == [], left
    assert names(kube, "rayjobs", "rayclusters", "raycronjobs") == []
    assert all(operator_pods(kube, ns) == [] for ns in OPERATORS)
    print(f"operators from charts: up --wait {up_seconds:.0f}s, destroy {destroy_seconds:.0f}s")
