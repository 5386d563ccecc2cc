"""A Capacity Block node group follows the block's window; the job is told when the nodes go away."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from grpo_infra.check import violations
from grpo_infra.deadline import EXPIRATION_VARIABLE
from grpo_infra.nodepools import launch_template_args, node_group_args
from grpo_infra.nodepools.capacity_blocks import checkpoint_deadline_env, scheduled_actions
from grpo_infra.spec import Environment, load_stack

from .conftest import ROOT

BEFORE = datetime(2026, 12, 1, tzinfo=UTC)
DURING = datetime(2026, 12, 15, tzinfo=UTC)
AFTER_SCALE_IN = datetime(2026, 12, 21, 11, 0, tzinfo=UTC)


def eks_prod() -> Environment:
    return load_stack("eks-prod", ROOT).environment


def changed(edit) -> Environment:
    data = eks_prod().model_dump(by_alias=True, exclude_none=True, mode="json")
    edit(data)
    return Environment.model_validate(data)


def test_the_group_holds_the_gang_only_inside_the_block() -> None:
    env = eks_prod()
    pool = env.gang.pool
    sizes = [
        node_group_args(env, pool, now)["scaling_config"]["desired_size"] for now in (BEFORE, DURING, AFTER_SCALE_IN)
    ]
    assert sizes == [0, 4, 0]


def test_scheduled_actions_scale_out_at_the_start_and_in_an_hour_before_the_end() -> None:
    pool = eks_prod().gang.pool
    before = {
        a["scheduled_action_name"]: (a["start_time"], a["desired_capacity"]) for a in scheduled_actions(pool, BEFORE)
    }
    assert before == {
        "h100-efa-capacity-block-start": ("2026-12-14T11:30:00Z", 4),
        "h100-efa-capacity-block-scale-in": ("2026-12-21T10:30:00Z", 0),
    }
    # Auto Scaling refuses a start time in the past: only what is still ahead is created.
    assert [a["scheduled_action_name"] for a in scheduled_actions(pool, DURING)] == ["h100-efa-capacity-block-scale-in"]
    assert scheduled_actions(pool, AFTER_SCALE_IN) == []


def test_the_launch_template_names_the_instance_type_and_the_block() -> None:
    env = eks_prod()
    template = launch_template_args(env, env.gang.pool)
    assert template is not None
    assert template["instance_type"] == "p5.48xlarge"
    assert template["instance_market_options"] == {"market_type": "capacity-block"}
    assert "instance_types" not in node_group_args(env, env.gang.pool, BEFORE)


def test_verl_is_told_the_scale_in_less_the_longest_save() -> None:
    # 2026-12-21T10:30:00Z = 1797849000; less the default 300 s save.
    assert checkpoint_deadline_env(eks_prod()) == [(EXPIRATION_VARIABLE, str(1797849000 - 300))]
    assert checkpoint_deadline_env(load_stack("gke-dev", ROOT).environment) == []


def test_a_walltime_longer_than_the_block_is_refused() -> None:
    env = changed(lambda d: d["kubernetes"]["rayJob"].update(activeDeadlineSeconds=7 * 86400))
    found = [v for v in violations(env) if v.rule == "capacity-block-walltime"]
    assert len(found) == 1
    assert found[0].where.endswith("kubernetes.rayJob.activeDeadlineSeconds")
    assert "at most 601200" in found[0].message and found[0].by == f"{7 * 86400 - 601200} s"
    assert [v for v in violations(eks_prod()) if v.rule == "capacity-block-walltime"] == []


def test_a_job_without_walltime_on_a_block_is_refused() -> None:
    def unbounded(d):
        d["kubernetes"]["rayJob"]["activeDeadlineSeconds"] = None

    data = eks_prod().model_dump(by_alias=True, mode="json")
    unbounded(data)
    env = Environment.model_validate(data)
    assert [v.rule for v in violations(env) if v.rule == "capacity-block-walltime"] == ["capacity-block-walltime"]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (None, "needs the block's window in `capacityBlock`"),
        ({"start": "2026-12-14T11:30:00Z", "end": "2026-12-14T11:00:00Z"}, "end must be after"),
        ({"start": "2026-12-14T11:30:00Z", "end": "2026-12-14T12:00:00Z"}, "leaves no time in the block"),
        ({"start": "2026-12-14T11:30:00Z", "end": "2026-12-21T11:30:00Z", "scaleInMinutes": 30}, "greater than 30"),
        ({"start": "2026-12-14T11:30:00", "end": "2026-12-21T11:30:00Z"}, "timezone"),
    ],
)
def test_a_block_window_ec2_cannot_honour_is_bad_input(block, message: str) -> None:
    def edit(d):
        eks = d["pools"][0]["eks"]
        if block is None:
            eks.pop("capacityBlock")
        else:
            eks["capacityBlock"] = copy.deepcopy(block)

    with pytest.raises(ValidationError, match=message):
        changed(edit)
