"""EKS managed node groups: one per pool, fixed size, NVIDIA AMI, EFA through a launch template.

Keys are pulumi-aws argument names (`aws.eks.NodeGroup`, `aws.ec2.LaunchTemplate`), so the Pulumi
layer passes them through unchanged; it only wires the launch template's id into the node group.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from .capacity_blocks import desired_now, utc_now
from .efa import network_interfaces
from .labels import node_selector

AMI_TYPE = "AL2023_x86_64_NVIDIA"
HEAD_AMI_TYPE = "AL2023_x86_64_STANDARD"
_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


class NodePoolError(ValueError):
    """A pool that the cloud cannot provide as described; the message says which field to set."""


def _eks(env: Environment, pool: Pool) -> Any:
    if env.kubernetes is None or env.kubernetes.provider != "eks" or pool.eks is None:
        raise NodePoolError(f"pool {pool.name} is not an EKS pool")
    return pool.eks


def launch_template_args(env: Environment, pool: Pool) -> dict[str, Any] | None:
    """The launch template a pool needs for EFA interfaces or a capacity reservation; None if neither."""
    eks = _eks(env, pool)
    args: dict[str, Any] = {}
    if pool.fabric.kind == "efa":
        if not eks.security_group_ids:
            raise NodePoolError(
                f"pool {pool.name}: an EFA pool needs eks.securityGroupIds for its EFA interfaces "
                "(the cluster security group, which allows all traffic between its members)"
            )
        args["network_interfaces"] = network_interfaces(pool.fabric.devices_per_node, eks.security_group_ids)
    if eks.capacity_reservation_id:
        args["capacity_reservation_specification"] = {
            "capacity_reservation_target": {"capacity_reservation_id": eks.capacity_reservation_id}
        }
    if eks.capacity_type == "CAPACITY_BLOCK":
        # A Capacity Block launches only from a launch template with this market type and the instance type
        # (docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html); the node group then names no
        # instance types of its own (EKS refuses both).
        args["instance_market_options"] = {"market_type": "capacity-block"}
        args["instance_type"] = eks.instance_type
    if not args:
        return None
    return {
        "description": f"GPU pool {pool.name} of cluster {env.kubernetes.cluster_name}",  # type: ignore[union-attr]
        **args,
        "tags": {"grpo-infra/pool": pool.name},
    }


def node_group_args(env: Environment, pool: Pool, now: datetime | None = None) -> dict[str, Any]:
    """The managed node group: desired = min = max = the pool's size, since a gang needs every node.

    On a Capacity Block the group holds the pool's size only inside the block's window, as of `now` (the time
    of `pulumi up`); scheduled actions (`capacity_blocks.scheduled_actions`) move it at the start and before
    the end, and the Pulumi layer leaves the desired size to them."""
    eks = _eks(env, pool)
    if eks.node_role_arn is None:
        raise NodePoolError(
            f"pool {pool.name}: set eks.nodeRoleArn (the IAM role the nodes run as) to create the node group"
        )
    size = pool.node_count
    block = eks.capacity_type == "CAPACITY_BLOCK"
    desired = desired_now(pool, now or utc_now())
    return {
        "cluster_name": env.kubernetes.cluster_name,  # type: ignore[union-attr]
        "node_group_name": pool.name,
        "node_role_arn": eks.node_role_arn,
        "subnet_ids": list(eks.subnet_ids),
        # A Capacity Block's instance type is the launch template's (EKS refuses it in both places).
        **({} if block else {"instance_types": [eks.instance_type]}),
        "ami_type": AMI_TYPE,
        # The AMI release decides the NVIDIA driver (`grpo_infra.image.driver.EKS_AMI_MIN_RELEASE`, check rule
        # eks-ami-driver); unset, EKS takes the newest release for the cluster's version at creation.
        **({"release_version": eks.release_version} if eks.release_version else {}),
        "capacity_type": eks.capacity_type,
        "scaling_config": {"desired_size": desired, "min_size": desired if not block else 0, "max_size": size},
        "labels": node_selector(pool),
        "taints": [
            {"key": t.key, **({"value": t.value} if t.value is not None else {}), "effect": _EFFECTS[t.effect]}
            for t in pool.taints
        ],
        "tags": {"grpo-infra/pool": pool.name},
    }


def head_node_group_args(env: Environment) -> dict[str, Any]:
    """The head pool's node group: CPU nodes, no taints, the head pool's labels, standard AL2023 AMI."""
    head = env.kubernetes.head_pool if env.kubernetes is not None else None
    if env.kubernetes is None or env.kubernetes.provider != "eks" or head is None or head.eks is None:
        raise NodePoolError("the stack has no EKS head pool")
    return {
        "cluster_name": env.kubernetes.cluster_name,
        "node_group_name": head.name,
        "node_role_arn": head.eks.node_role_arn,
        "subnet_ids": list(head.eks.subnet_ids),
        "instance_types": [head.eks.instance_type],
        "ami_type": HEAD_AMI_TYPE,
        "capacity_type": "ON_DEMAND",
        "scaling_config": {"desired_size": head.nodes, "min_size": head.nodes, "max_size": head.nodes},
        "labels": dict(head.labels),
        "taints": [],
        "tags": {"grpo-infra/pool": head.name},
    }
