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
from tests.check.test_check import ROOT
from tests.kube.conftest import local_cluster, local_k8s

pytestmark = pytest.mark.cluster


def _check(kubeconfig: str, *extra: str):
    return CliRunner().invoke(app, ["check", "local-k8s", "--root", str(ROOT), "--kubeconfig", kubeconfig, *extra])


def test_check_compares_the_worker_with_the_real_nodes_allocatable() -> None:
    with local_cluster(local_k8s()) as paths:
        kubeconfig = str(paths.kubeconfig)
        # The fake nodes report what the pool says a node has (24 GiB): the worker (23.2 GiB) fits.
        fits = _check(kubeconfig, "--explain")
        assert fits.exit_code == 0, fits.output
        assert "real Nodes of pool sim-gpu" in fits.output and "local-gpu-2" in fits.output

        # A node whose kubelet keeps more than the stack expects: the same stack is now refused.
        patch = {"status": {"allocatable": {"memory": "16Gi"}}}
        cluster.kubectl(
            paths, "patch", "node", "local-gpu-2", "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )
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
