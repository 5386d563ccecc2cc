"""A pool the cloud cannot provide as described is refused with the field to fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from grpo_infra.pulumi_graph import GraphError, record
from grpo_infra.spec import SpecError, load_stack

from .conftest import needs_extra

Edit = Callable[[dict[str, Any]], None]


def _pool(edit: Callable[[dict[str, Any]], None]) -> Edit:
    return lambda env: edit(env["pools"][0])


@pytest.mark.parametrize(
    ("stack", "edit", "message"),
    [
        (
            "eks-prod",
            _pool(lambda p: p.update(taints=[])),
            "an eks GPU pool carries the taint nvidia.com/gpu with effect NoSchedule",
        ),
        (
            "eks-prod",
            _pool(lambda p: p["fabric"].update(devicesPerNode=16)),
            "fabric.devicesPerNode is 16, but a p5.48xlarge has 32 EFA interfaces",
        ),
        (
            "eks-prod",
            _pool(lambda p: p["eks"].update(instanceType="x9.48xlarge")),
            "eks.instanceType x9.48xlarge: EFA interface count unknown; known EFA instance types: g5.48xlarge",
        ),
        (
            "eks-prod",
            _pool(lambda p: p["eks"].update(subnetIds=["subnet-0a", "subnet-0b"])),
            "an EFA pool takes exactly one subnet in eks.subnetIds",
        ),
        (
            "eks-prod",
            _pool(lambda p: p.update(existing={"installGpuOperator": True})),
            "`existing` is only for an existing cluster, this one is eks",
        ),
        (
            "gke-dev",
            _pool(lambda p: p.update(taints=[{"key": "grpo-infra/gpu", "value": "h100", "effect": "NoSchedule"}])),
            "a gke GPU node carries the taint nvidia.com/gpu=present:NoSchedule (GKE adds it)",
        ),
        (
            "gke-dev",
            _pool(lambda p: p["gpu"].update(perNode=4)),
            "gke.machineType a3-highgpu-8g has 8 GPUs, but gpu.perNode is 4",
        ),
    ],
)
def test_inconsistent_pools_are_bad_input(variant, stack: str, edit: Edit, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_stack(stack, variant(stack, edit))
    assert message in raised.value.render()
    assert raised.value.render().startswith(f"stacks/Pulumi.{stack}.yaml: grpo-infra:environment")
    assert "pools[0]" in raised.value.render()


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("nodeRoleArn", "pool h100-efa: set eks.nodeRoleArn (the IAM role the nodes run as) to create the node group"),
        ("securityGroupIds", "pool h100-efa: an EFA pool needs eks.securityGroupIds for its EFA interfaces"),
    ],
)
def test_what_only_pulumi_up_needs_stops_the_program_with_the_field(variant, field: str, message: str) -> None:
    needs_extra("eks-prod")
    root = variant("eks-prod", _pool(lambda p: p["eks"].pop(field)))
    load_stack("eks-prod", root)  # synth and check still work without it
    with pytest.raises(GraphError) as raised:
        record("eks-prod", root)
    assert str(raised.value).startswith(f"stacks/Pulumi.eks-prod.yaml: {message}")
    assert "\n" not in str(raised.value)
