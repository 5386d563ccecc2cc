"""A launcher's `rayPorts` (hand-started `ray`, SkyPilot, dstack) must hold one job's block sized from the pool's
nodes, as Slurm's must: `check` refuses a smaller range in one line naming the field."""

from __future__ import annotations

from typing import Any

from grpo_infra.check import findings
from tests.slurm.variants import variant


def _ray_launcher(cpus: int, start: int, end: int) -> Any:
    def edit(data: dict[str, Any]) -> None:
        for pool in data["pools"]:
            pool["cpus"] = cpus
        data["slurm"].pop("nodeLayouts", None)
        data["launchers"]["ray"]["rayPorts"] = {"start": start, "end": end}

    return edit


def test_a_launcher_range_without_one_sized_block_is_refused_in_one_line() -> None:
    env = variant("local-slurm", _ray_launcher(224, 30000, 30255))
    found = [f"{v.where}: {v.message}" for v in findings(env) if v.rule == "ray-ports-block"]
    assert env.gang.pool.gpu.per_node == 8
    assert found == [
        "grpo-infra:environment.launchers.ray.rayPorts: 30000-30255 holds 256 ports, less than one job's block of "
        f"320 that pool {env.gang.pool.name}'s nodes need (224 CPUs, 8 GPUs: 16 fixed ports and 252 worker "
        "ports); widen the range"
    ]
    wide = variant("local-slurm", _ray_launcher(224, 30000, 30639))
    assert [v for v in findings(wide) if v.rule == "ray-ports-block"] == []
