"""A refusal names the field a user must change: a node size nobody has is the pool's mistake, not the reserve's."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grpo_infra.spec.load import ENVIRONMENT_KEY, SpecError, environment_from_config
from tests.spec.test_hostile_values import raw_of

PREFIX = f"stack.yaml: {ENVIRONMENT_KEY}: "


def refusal(raw: dict[str, Any]) -> str:
    """The one line `check` prints for `raw`."""
    with pytest.raises(SpecError) as caught:
        environment_from_config({ENVIRONMENT_KEY: raw}, [], "stack.yaml")
    return caught.value.render()


def two_pools() -> dict[str, Any]:
    """onprem-k8s (reserve: 8 CPUs, 32 GiB) with a second pool like its first."""
    raw = raw_of("onprem-k8s")
    second = copy.deepcopy(raw["pools"][0])
    second["name"] = "spare"
    raw["pools"].append(second)
    return raw


@pytest.mark.parametrize(("key", "value"), [("memoryGib", 1), ("cpus", 4), ("cpus", 8)])
def test_a_pool_smaller_than_the_reserve_is_refused_at_its_own_size(key: str, value: int) -> None:
    raw = raw_of("onprem-k8s")
    raw["pools"][0][key] = value
    message = refusal(raw)
    assert message.startswith(f"{PREFIX}pools[0].{key} {value} (pool h100-roce) leaves nothing"), message
    assert "\n" not in message


def test_of_two_pools_the_one_too_small_is_named() -> None:
    raw = two_pools()
    raw["pools"][1]["memoryGib"] = 16
    assert refusal(raw).startswith(f"{PREFIX}pools[1].memoryGib 16 (pool spare) leaves nothing")


def test_a_reserve_no_pool_can_give_is_refused_at_the_reserve() -> None:
    raw = two_pools()
    raw["kubernetes"]["nodeReserve"]["memoryGib"] = 32768
    message = refusal(raw)
    assert message.startswith(f"{PREFIX}kubernetes.nodeReserve.memoryGib 32768 keeps back all"), message
    assert "largest has 1536 GiB" in message


def test_a_host_in_two_pools_is_refused_at_the_later_pools_hosts() -> None:
    raw = raw_of("local-slurm")
    second = copy.deepcopy(raw["pools"][0])
    second["name"] = "spare"
    second["hosts"] = "node9,node2"
    raw["pools"].append(second)
    assert refusal(raw) == f"{PREFIX}pools[1].hosts: node2 is already a host of pool {raw['pools'][0]['name']}"


def test_quotas_beyond_the_pools_are_refused_at_the_tenants_quotas() -> None:
    raw = raw_of("onprem-k8s")
    raw["tenants"][0]["gpuQuota"] += 1000
    assert refusal(raw).startswith(f"{PREFIX}tenants[].gpuQuota: tenant GPU quotas add up to")


@pytest.mark.parametrize(("stack", "launcher"), [("gke-dev", "skypilot"), ("eks-prod", "dstack")])
def test_two_storage_entries_at_one_path_are_refused_at_the_launchers_storage(stack: str, launcher: str) -> None:
    raw = raw_of(stack)
    storage = raw["launchers"][launcher]["storage"]
    storage[0]["path"] = storage[1]["path"]
    assert refusal(raw) == (
        f"{PREFIX.removesuffix(': ')}.launchers.{launcher}.storage: path {storage[1]['path']} is mounted twice; "
        "give each storage entry its own path"
    )
