"""What the local cluster is made of, from a stack, before anything starts."""

from __future__ import annotations

import base64

import pytest

from grpo_infra.kube import plan
from grpo_infra.spec import load_stack

WEBHOOKS = """---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
  name: mjob.kb.io
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-ray-io-v1-rayjob}
  name: mrayjob.kb.io
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}
  name: mworkload.kb.io
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  name: mpod.kb.io
  sideEffects: None
"""


@pytest.fixture(scope="module")
def onprem():
    return load_stack("onprem-k8s").environment


def test_fake_nodes_are_the_pools_hosts_with_their_capacity_labels_and_taints(onprem) -> None:
    nodes = {n["metadata"]["name"]: n for n in plan.fake_nodes(onprem)}
    # onprem-k8s: hosts dc1-gpu-[01-04], 8 H100 and 8 RoCE devices, 128 CPUs, 1536 GiB each.
    assert sorted(nodes) == ["dc1-gpu-01", "dc1-gpu-02", "dc1-gpu-03", "dc1-gpu-04", plan.CPU_NODE]
    gpu = nodes["dc1-gpu-03"]
    assert gpu["status"]["capacity"] == {
        "cpu": "128",
        "memory": "1536Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "rdma/roce": "8",
    }
    assert gpu["metadata"]["labels"]["grpo-infra/pool"] == "h100-roce"
    assert gpu["spec"]["taints"] == [{"key": "grpo-infra/gpu", "value": "h100", "effect": "NoSchedule"}]
    assert gpu["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    cpu = nodes[plan.CPU_NODE]
    assert "nvidia.com/gpu" not in cpu["status"]["capacity"] and cpu["spec"] == {}


def test_kueue_runs_the_stacks_queueing_config_on_loopback(onprem, tmp_path) -> None:
    cfg = plan.kueue_config(onprem, plan.Paths(tmp_path))
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"]["host"] == "127.0.0.1"
    assert cfg["health"]["healthProbeBindAddress"].startswith("127.0.0.1:")
    assert cfg["metrics"] == {"bindAddress": "0"}
    # The stack's own admission behaviour is unchanged.
    assert cfg["waitForPodsReady"]["blockAdmission"] is True
    assert cfg["waitForPodsReady"]["timeout"] == "45m"
    assert cfg["integrations"]["frameworks"] == ["ray.io/rayjob", "ray.io/raycluster"]


def test_only_kueue_and_ray_webhooks_are_registered_at_loopback() -> None:
    (config,) = plan.webhook_configurations(WEBHOOKS, b"PEM")
    names = [h["name"] for h in config["webhooks"]]
    assert names == ["mrayjob.kb.io", "mworkload.kb.io"]
    for hook in config["webhooks"]:
        assert hook["clientConfig"]["url"].startswith(f"https://127.0.0.1:{plan.PORTS['kueue-webhook']}/")
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"


def test_every_port_is_distinct() -> None:
    assert len(set(plan.PORTS.values())) == len(plan.PORTS)


def test_missing_binaries_name_the_build_script(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRPO_INFRA_CACHE", str(tmp_path))
    with pytest.raises(plan.KubeError, match=r"scripts/build-kube.sh"):
        plan.require_tools()


def test_only_the_crds_kueues_kustomization_patches_convert_through_its_webhook() -> None:
    kustomization = """
resources: [bases/kueue.x-k8s.io_clusterqueues.yaml]
patches:
- path: patches/webhook_in_localqueues.yaml
- path: patches/webhook_in_workloads.yaml
#- path: patches/webhook_in_resourceflavors.yaml
- path: patches/cainjection_in_workloads.yaml
"""
    assert plan.conversion_kinds(kustomization) == {"localqueues", "workloads"}
