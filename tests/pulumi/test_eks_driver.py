"""The EKS AMI release decides the NVIDIA driver: a pinned release older than the image's CUDA needs is refused."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra.check import violations
from grpo_infra.image.driver import EKS_AMI_MIN_RELEASE, eks_release_problem, pool_driver
from grpo_infra.nodepools.eks import node_group_args
from grpo_infra.spec import Environment, load_stack

from .conftest import ROOT


def eks_prod(release: str | None) -> Environment:
    data: dict[str, Any] = load_stack("eks-prod", ROOT).environment.model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    gpu = next(p for p in data["pools"] if "eks" in p)
    if release is None:
        gpu["eks"].pop("releaseVersion", None)
    else:
        gpu["eks"]["releaseVersion"] = release
    return Environment.model_validate(data)


def _refusals(env: Environment) -> list[str]:
    return [v.line() for v in violations(env) if v.rule == "eks-ami-driver"]


def test_the_shipped_stack_pins_a_release_with_the_cuda_13_driver_and_renders_it() -> None:
    env = load_stack("eks-prod", ROOT).environment
    assert env.image.contents.cuda == "13.0"
    assert _refusals(env) == []
    pool = env.gang.pool
    assert node_group_args(env, pool)["release_version"] == pool.eks.release_version
    assert pool.eks.release_version in pool_driver(env, pool)


@pytest.mark.parametrize(
    ("release", "refused"),
    [
        ("1.34.1-20251016", True),  # 570.195.03 (the CHANGELOG's 1.34 table)
        ("1.34.1-20251023", False),  # 580.95.05
        ("1.33.5-20251023", True),  # 1.33 got 580 one release later
        ("1.33.5-20251029", False),
        ("1.28.15-20251120", True),  # no 1.28 release ships R580
    ],
)
def test_a_release_older_than_the_images_driver_is_refused_with_its_first_good_release(
    release: str, refused: bool
) -> None:
    found = _refusals(eks_prod(release))
    assert bool(found) is refused, found
    if refused:
        assert "580.65.06" in found[0] and "pools[" in found[0]


def test_unpinned_the_node_group_takes_the_newest_release_and_the_runbook_says_which_suffice() -> None:
    env = eks_prod(None)
    assert _refusals(env) == []
    assert "release_version" not in node_group_args(env, env.gang.pool)
    line = pool_driver(env, env.gang.pool)
    assert "newest release" in line and "1.34: 20251023" in line


def test_every_row_of_the_table_is_a_date_and_lower_needs_take_any_al2023_release() -> None:
    for table in EKS_AMI_MIN_RELEASE.values():
        assert all(len(d) == 8 and d.isdigit() for d in table.values())
    assert eks_release_problem("560.28.03", "1.30.0-20240924") is None
    assert eks_release_problem("560.28.03", "1.30.0-20240801") is not None
