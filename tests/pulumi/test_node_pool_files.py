"""`synth` shows every node pool a Kubernetes stack creates, as the Pulumi program registers it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from grpo_infra.nodepools.files import DESIRED_BY_SCHEDULE
from grpo_infra.spec import load_stack
from grpo_infra.synth import render

from .conftest import KUBERNETES_STACKS, ROOT, shipped_graph
from .test_node_pools import NODE_GROUP, NODE_PATCH, NODE_POOL


def camel(key: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key)


def as_registered(value: Any) -> Any:
    """The rendered arguments with the keys Pulumi's engine records (camelCase)."""
    if isinstance(value, dict):
        return {camel(k): as_registered(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_registered(v) for v in value]
    return value


def pool_files(stack: str) -> dict[str, Any]:
    files = render(load_stack(stack, ROOT).environment)
    shown = {p.removeprefix("nodepools/"): t for p, t in files.items() if p.startswith("nodepools/")}
    # The RDMA device plugin's file holds several objects; the pools' files one document each.
    return {name: list(yaml.safe_load_all(t)) if "---" in t else yaml.safe_load(t) for name, t in shown.items()}


@pytest.mark.parametrize("stack", KUBERNETES_STACKS)
def test_every_pool_and_created_head_pool_has_a_file(stack: str) -> None:
    env = load_stack(stack, ROOT).environment
    names = {f"{p.name}.yaml" for p in env.pools}
    if env.kubernetes.provider in ("eks", "gke"):
        names.add(f"{env.kubernetes.head_pool.name}.yaml")
    assert names <= set(pool_files(stack))


def test_each_eks_node_group_file_is_what_pulumi_up_registers() -> None:
    graph = shipped_graph("eks-prod")
    for name, body in pool_files("eks-prod").items():
        if not isinstance(body, dict) or "nodeGroup" not in body:
            continue
        registered = graph.named(NODE_GROUP, name.removesuffix(".yaml")).inputs
        shown = as_registered(body["nodeGroup"])
        if shown["scalingConfig"]["desiredSize"] == DESIRED_BY_SCHEDULE:
            # The scheduled actions own it; the recorded value is the one of the moment of recording.
            shown["scalingConfig"].pop("desiredSize")
            registered = {**registered, "scalingConfig": {**registered["scalingConfig"]}}
            registered["scalingConfig"].pop("desiredSize")
        assert {k: registered.get(k) for k in shown} == shown


def test_each_gke_node_pool_file_is_what_pulumi_up_registers() -> None:
    graph = shipped_graph("gke-dev")
    for name, body in pool_files("gke-dev").items():
        if isinstance(body, dict) and "nodePool" in body:
            registered = graph.named(NODE_POOL, name.removesuffix(".yaml")).inputs
            shown = as_registered(body["nodePool"])
            assert {k: registered.get(k) for k in shown} == shown


def test_existing_nodes_show_the_labels_and_taints_patched_onto_them() -> None:
    graph = shipped_graph("onprem-k8s")
    patched = {r.inputs["metadata"]["name"] for r in graph.of_type(NODE_PATCH)}
    (body,) = [b for b in pool_files("onprem-k8s").values() if isinstance(b, dict) and "nodePatches" in b]
    assert {p["metadata"]["name"] for p in body["nodePatches"]} == patched


def test_a_capacity_blocks_file_holds_its_whole_schedule_and_no_moment_of_synth() -> None:
    """The desired size of a block's node group follows its scheduled actions: the file lists both actions
    whenever it is rendered, so it is the same before, during and after the block."""
    (body,) = [b for b in pool_files("eks-prod").values() if isinstance(b, dict) and "schedule" in b]
    assert body["nodeGroup"]["scaling_config"]["desired_size"] == DESIRED_BY_SCHEDULE
    assert [a["scheduled_action_name"].rsplit("-", 1)[1] for a in body["schedule"]] == ["start", "in"]
