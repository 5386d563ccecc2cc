"""`check` refuses a pool whose nodes may hold more Ray workers than a job's port block has worker ports."""

from __future__ import annotations

from typing import Any

from grpo_infra.check.slurm_rules import slurm_violations
from grpo_infra.ports import WORKER_PORTS
from tests.slurm.variants import stack, variant


def _cpus(cpus: int) -> Any:
    def edit(data: dict[str, Any]) -> None:
        for pool in data["pools"]:
            pool["cpus"] = cpus
        data["slurm"].pop("nodeLayouts", None)

    return edit


def _worker_port_lines(env: Any) -> list[str]:
    return [v.message for v in slurm_violations(env) if v.rule == "slurm-worker-ports"]


def test_a_node_with_more_cpus_than_worker_ports_is_refused() -> None:
    env = variant("local-slurm", _cpus(WORKER_PORTS))
    gpus = env.gang.pool.gpu.per_node
    (line,) = _worker_port_lines(env)
    assert f"may hold {WORKER_PORTS + gpus + 8} workers per node ({WORKER_PORTS} CPUs, {gpus} GPUs" in line
    assert f"has {WORKER_PORTS} worker ports" in line


def test_a_node_that_fits_the_block_passes() -> None:
    assert _worker_port_lines(stack("local-slurm")) == []
    gpus = stack("local-slurm").gang.pool.gpu.per_node
    assert _worker_port_lines(variant("local-slurm", _cpus(WORKER_PORTS - gpus - 8))) == []
    assert len(_worker_port_lines(variant("local-slurm", _cpus(WORKER_PORTS - gpus - 7)))) == 1
