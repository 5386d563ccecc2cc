"""`check --kubeconfig`: the worker against the real Nodes' allocatable of a running cluster.

Runs against the local Kubernetes (a real API server; KWOK nodes whose status.allocatable the test sets
like a kubelet would).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import Paths, fake_nodes
from tests.check.test_check import ROOT
from tests.kube.conftest import LocalClusters, get, local_k8s, wait_until

# On the session's local-k8s cluster with KWOK nodes, beside tests/kube's modules on it.
pytestmark = pytest.mark.cluster("kwok")


def _check(kubeconfig: str, *extra: str):
    return CliRunner().invoke(app, ["check", "local-k8s", "--root", str(ROOT), "--kubeconfig", kubeconfig, *extra])


def test_check_compares_the_worker_with_the_real_nodes_allocatable(local_clusters: LocalClusters) -> None:
    paths = local_clusters.use(local_k8s())
    kubeconfig = str(paths.kubeconfig)
    allocatable = get(paths, "node", "local-gpu-2")["status"]["allocatable"]
    try:
        # The fake nodes report what the pool says a node has (24 GiB): the worker (23.2 GiB) fits.
        fits = _check(kubeconfig, "--explain")
        assert fits.exit_code == 0, fits.output
        assert "real Nodes of pool sim-gpu" in fits.output and "local-gpu-2" in fits.output

        # A node whose kubelet keeps more than the stack expects: the same stack is now refused.
        _patch_allocatable(paths, "local-gpu-2", {"memory": "16Gi"})
        short = _check(kubeconfig, "--json")
        assert short.exit_code == 1, short.output
        found = [v for v in json.loads(short.stdout) if v["rule"] == "pod-fits-real-node"]
        assert len(found) == 1, found
        assert "local-gpu-2 has 16.0 GiB allocatable" in found[0]["message"]
        assert found[0]["where"].endswith("pools[0].kernelMemoryGib")

        # A host of the pool that is not a Node of the cluster.
        cluster.kubectl(paths, "delete", "node", "local-gpu-4", "--wait=false")
        missing = _check(kubeconfig, "--json")
        rules = {v["rule"]: v for v in json.loads(missing.stdout)}
        assert "local-gpu-4 is not a Node" in rules["pool-nodes-exist"]["message"]
    finally:
        # The shared cluster as it was: both nodes back as `kube up` made them, Ready.
        _patch_allocatable(paths, "local-gpu-2", allocatable)
        cluster.apply(paths, [n for n in fake_nodes(local_k8s()) if n["metadata"]["name"] == "local-gpu-4"])
        cluster.kubectl(paths, "wait", "--for=condition=Ready", "node/local-gpu-4", "--timeout=60s")
        assert get(paths, "node", "local-gpu-2")["status"]["allocatable"] == allocatable
        wait_until(
            lambda: get(paths, "node", "local-gpu-4")["status"]["allocatable"] == allocatable, 30, "local-gpu-4 back"
        )


def _patch_allocatable(paths: Paths, node: str, allocatable: dict[str, str]) -> None:
    patch = {"status": {"allocatable": allocatable}}
    cluster.kubectl(paths, "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    result = _check(str(kubeconfig))
    assert result.exit_code == 2
    assert result.output.count("\n") <= 2 and "kubectl get nodes" in result.output


def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path) -> None:
    result = _check(str(tmp_path / "absent"))
    assert result.exit_code == 2 and "does not exist" in result.output
