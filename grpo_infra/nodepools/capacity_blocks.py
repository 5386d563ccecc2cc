"""A Capacity Block for ML on EKS: the node group follows the block's window, and the job knows its end.

- EKS, "Create a managed node group with Capacity Blocks for ML"
  (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html): only from a custom launch
  template whose data carries `InstanceMarketOptions.MarketType: capacity-block`, the block's id in
  `CapacityReservationSpecification` and `InstanceType`; set the node group's desired size to 0 before
  upgrading it.
- EC2 Auto Scaling, "Use Capacity Blocks for machine learning workloads"
  (https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html): when the
  block begins, scheduled scaling launches as many instances as the block holds; scale in to zero more
  than 30 minutes before its end. EC2 starts terminating what still runs 30 minutes before the end
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html).

So the managed node group is created at 0 nodes, and two scheduled actions on its Auto Scaling group
(pulumi-aws `aws.autoscaling.Schedule`) scale it to the pool's size at the block's start and back to 0
`scaleInMinutes` before its end. A scheduled action whose time has passed cannot be created (Auto Scaling
refuses a start time in the past), so the actions are derived from the time of `pulumi up`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..deadline import EXPIRATION_VARIABLE, save_deadline
from ..spec import Environment
from ..spec.pools import CapacityBlock, Pool


def block_of(pool: Pool) -> CapacityBlock | None:
    """The pool's Capacity Block, when it runs on one."""
    if pool.eks is None or pool.eks.capacity_type != "CAPACITY_BLOCK":
        return None
    return pool.eks.capacity_block


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def desired_now(pool: Pool, now: datetime) -> int:
    """How many nodes the group should hold at `now`: the pool's size inside the block's usable window."""
    block = block_of(pool)
    if block is None:
        return pool.node_count
    return pool.node_count if block.start <= now < block.scale_in_at else 0


def scheduled_actions(pool: Pool, now: datetime) -> list[dict[str, Any]]:
    """The Auto Scaling scheduled actions still ahead of `now` (pulumi-aws `aws.autoscaling.Schedule` arguments
    without `autoscaling_group_name`, which the Pulumi layer takes from the node group)."""
    block = block_of(pool)
    if block is None:
        return []
    size = pool.node_count
    actions = []
    if now < block.start:
        actions.append(
            {
                "scheduled_action_name": f"{pool.name}-capacity-block-start",
                "start_time": _stamp(block.start),
                "min_size": size,
                "max_size": size,
                "desired_capacity": size,
            }
        )
    if now < block.scale_in_at:
        actions.append(
            {
                "scheduled_action_name": f"{pool.name}-capacity-block-scale-in",
                "start_time": _stamp(block.scale_in_at),
                "min_size": 0,
                "max_size": size,
                "desired_capacity": 0,
            }
        )
    return actions


def utc_now() -> datetime:
    """The clock `pulumi up` runs at (the one impure input of the schedule)."""
    return datetime.now(UTC)


def checkpoint_deadline_env(env: Environment) -> list[tuple[str, str]]:
    """The job's environment telling verl when its Capacity Block ends: the scale-in time less the longest
    checkpoint save (the same rule as the Slurm time limit, `grpo_infra.deadline`). Empty off a block.

    The Ray cluster builder adds these to every Ray container (head and workers): verl reads the variable in
    the trainer process (verl 0.9.1 verl/utils/checkpoint/checkpoint_manager.py, should_save_ckpt_esi)."""
    block = block_of(env.gang.pool)
    if block is None:
        return []
    deadline = save_deadline(int(block.scale_in_at.timestamp()), 0, block.checkpoint_save_seconds)
    return [(EXPIRATION_VARIABLE, str(deadline))]
