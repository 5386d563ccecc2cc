"""The graph recorder and `grpo-infra graph`: what `pulumi up` would register, reviewable offline."""

from __future__ import annotations

import json

import pulumi
import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.pulumi_graph import SECRET, GraphError, record

from .conftest import ROOT, needs_extra


class _Box(pulumi.ComponentResource):
    def __init__(self, type_: str, name: str) -> None:
        super().__init__(type_, name, None, None)
        self.register_outputs({})


def test_duplicate_urns_are_refused() -> None:
    def twice() -> None:
        _Box("grpo-infra:test:Box", "same")
        _Box("grpo-infra:test:Box", "same")

    with pytest.raises(GraphError, match=r"duplicate URN .*Box::same"):
        record("onprem-k8s", ROOT, program=twice)


def test_malformed_type_tokens_are_refused() -> None:
    with pytest.raises(GraphError, match="malformed type token 'Box'"):
        record("onprem-k8s", ROOT, program=lambda: _Box("Box", "one"))


def test_secret_inputs_are_masked_and_plaintext_leaks_are_reported() -> None:
    def program() -> None:
        config = pulumi.Config("grpo-infra")
        token = config.require_secret("hfToken")
        leaked = config.require("hfToken")  # read as plaintext: a leak the graph must report
        pulumi.CustomResource("grpo-infra:test:Thing", "thing", {"token": token, "note": leaked})

    graph = record("onprem-k8s", ROOT, program=program)
    thing = graph.named("grpo-infra:test:Thing", "thing")
    assert thing.inputs["token"] == SECRET
    assert thing.inputs["note"] == SECRET
    assert graph.plaintext_secrets == (f"{thing.urn} note",)
    assert "<secret>" not in graph.dumps()


def test_graph_command_prints_the_pool_and_the_rayjob() -> None:
    result = CliRunner().invoke(app, ["graph", "onprem-k8s", "--root", str(ROOT)])
    assert result.exit_code == 0, result.output
    for expected in ("grpo-infra:nodepools:ExistingNodePool", "h100-roce-dc1-gpu-01", "kubernetes:ray.io/v1:RayJob"):
        assert expected in result.output


def test_graph_json_has_every_resource_with_its_edges() -> None:
    result = CliRunner().invoke(app, ["graph", "onprem-k8s", "--root", str(ROOT), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["stack"] == "onprem-k8s"
    by_urn = {r["urn"]: r for r in data["resources"]}
    patches = [r for r in data["resources"] if r["type"] == "kubernetes:core/v1:NodePatch"]
    assert len(patches) == 4
    for patch in patches:
        assert by_urn[patch["parent"]]["type"] == "grpo-infra:nodepools:ExistingNodePool"
    for resource in data["resources"]:
        assert set(resource["dependencies"]) <= set(by_urn), f"{resource['urn']} depends on an unknown URN"
    assert "<secret>" not in result.output


def test_graph_json_of_eks_shows_the_node_group() -> None:
    needs_extra("eks-prod")
    result = CliRunner().invoke(app, ["graph", "eks-prod", "--root", str(ROOT), "--json"])
    assert result.exit_code == 0, result.output
    types = {r["type"] for r in json.loads(result.output)["resources"]}
    assert {"aws:eks/nodeGroup:NodeGroup", "aws:ec2/launchTemplate:LaunchTemplate"} <= types


def test_bad_input_exits_2_with_the_synth_message(tmp_path) -> None:
    runner = CliRunner()
    graph = runner.invoke(app, ["graph", "nope", "--root", str(ROOT)])
    synth = runner.invoke(app, ["synth", "nope", "--root", str(ROOT), "--out", str(tmp_path)])
    assert graph.exit_code == synth.exit_code == 2
    assert graph.output == synth.output
    assert "no such stack 'nope'" in graph.output
