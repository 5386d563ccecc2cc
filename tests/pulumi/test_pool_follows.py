"""The pool is the single source of truth: change it, and everything scheduled onto it follows."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra.k8s import objects
from grpo_infra.pulumi_graph import Graph, record
from grpo_infra.spec import SpecError, load_stack

from .conftest import needs_extra, shipped_graph

NODE_PATCH = "kubernetes:core/v1:NodePatch"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
RAYJOB = "kubernetes:ray.io/v1:RayJob"


def kind(env_objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [o for o in env_objects if o["kind"] == name]


def worker_pods(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    return [g["template"]["spec"] for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]]


def quota(cluster_queue: dict[str, Any], flavor: str, resource: str) -> str:
    for group in cluster_queue["spec"]["resourceGroups"]:
        for f in group["flavors"]:
            if f["name"] == flavor:
                return next(r["nominalQuota"] for r in f["resources"] if r["name"] == resource)
    raise KeyError(flavor)


def test_a_new_taint_moves_flavor_rayjob_and_node_patches_together(variant) -> None:
    new = {"key": "example.com/reserved-for", "value": "grpo", "effect": "NoExecute"}

    def retaint(env: dict[str, Any]) -> None:
        env["pools"][0]["taints"] = [new]

    root = variant("onprem-k8s", retaint)
    env = load_stack("onprem-k8s", root).environment
    rendered = objects(env)
    toleration = {"key": new["key"], "operator": "Equal", "value": "grpo", "effect": "NoExecute"}

    (flavor,) = [f for f in kind(rendered, "ResourceFlavor") if f["metadata"]["name"] == "h100-roce"]
    assert flavor["spec"]["nodeTaints"] == [{"key": new["key"], "effect": "NoExecute", "value": "grpo"}]
    (rayjob,) = kind(rendered, "RayJob")
    for pod in worker_pods(rayjob):
        assert pod["tolerations"] == [toleration]
        assert pod["nodeSelector"] == {"grpo-infra/pool": "h100-roce"}

    graph = record("onprem-k8s", root)
    for patch in graph.of_type(NODE_PATCH):
        assert patch.inputs["spec"]["taints"] == [{"key": new["key"], "value": "grpo", "effect": "NoExecute"}]
    (registered,) = graph.of_type(RAYJOB)
    for pod in worker_pods(registered.inputs):
        assert pod["tolerations"] == [toleration]


def test_larger_nodes_raise_the_cluster_queue_quota(variant) -> None:
    def bigger(env: dict[str, Any]) -> None:
        env["pools"][0]["cpus"] = 256

    before = objects(load_stack("onprem-k8s", variant("onprem-k8s", lambda env: None)).environment)
    after = objects(load_stack("onprem-k8s", variant("onprem-k8s", bigger)).environment)
    queue = {q["metadata"]["name"]: q for q in kind(before, "ClusterQueue")}["grpo-rl-team"]
    grown = {q["metadata"]["name"]: q for q in kind(after, "ClusterQueue")}["grpo-rl-team"]
    # rl-team holds 24 GPUs = 3 nodes' share; each node keeps 8 CPUs back (nodeReserve) and 50m for
    # the RDMA device plugin the stack installs: 3 × 119.95 = 359.85 CPUs.
    assert quota(queue, "h100-roce", "cpu") == "359850m"
    assert quota(grown, "h100-roce", "cpu") == "743850m"


def test_a_smaller_eks_pool_shrinks_node_group_gang_and_quota(variant) -> None:
    needs_extra("eks-prod")

    def shrink(env: dict[str, Any]) -> None:
        env["pools"][0]["nodes"] = 2
        env["tenants"][0]["gpuQuota"] = 16

    root = variant("eks-prod", shrink)
    env = load_stack("eks-prod", root).environment
    rendered = objects(env)
    (queue,) = kind(rendered, "ClusterQueue")
    assert quota(queue, "h100-efa", "nvidia.com/gpu") == "16"
    (rayjob,) = kind(rendered, "RayJob")
    groups = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert sum(g["replicas"] * g.get("numOfHosts", 1) for g in groups) == 2

    graph = record("eks-prod", root)
    scaling = graph.named(NODE_GROUP, "h100-efa").inputs["scalingConfig"]
    # eks-prod runs on a Capacity Block: 2 nodes inside its window, 0 outside, scheduled actions move it.
    assert scaling["maxSize"] == 2 and scaling["desiredSize"] in (0, 2)
    actions = [r.inputs for r in graph.resources if r.type == "aws:autoscaling/schedule:Schedule"]
    assert all(a["maxSize"] == 2 and a["desiredCapacity"] in (0, 2) for a in actions)


def test_a_pool_smaller_than_the_quotas_is_refused(variant) -> None:
    def shrink_only(env: dict[str, Any]) -> None:
        env["pools"][0]["nodes"] = 2

    with pytest.raises(SpecError, match=r"tenant GPU quotas add up to 32, more than the pools' 16 GPUs"):
        load_stack("eks-prod", variant("eks-prod", shrink_only))


def pool_resources(graph: Graph) -> set[str]:
    components = [r for r in graph.resources if r.type.startswith("grpo-infra:nodepools:")]
    return {d.urn for c in components for d in graph.descendants(c.urn) if d.custom}


@pytest.mark.parametrize("stack", ["eks-prod", "gke-dev", "onprem-k8s"])
def test_the_rayjob_waits_for_its_pool(stack: str) -> None:
    graph = shipped_graph(stack)
    (rayjob,) = graph.of_type(RAYJOB)
    nodes = pool_resources(graph)
    assert nodes
    # Along explicit dependency edges, which is also what `pulumi destroy` orders by.
    assert nodes <= graph.upstream(rayjob.urn)
