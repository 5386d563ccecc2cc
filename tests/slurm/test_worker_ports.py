"""A job's port block is sized from its pool's nodes: a worker port for every worker, I/O worker and driver
a node's Ray may hold. `check` refuses a range too small for one such block, naming the field."""

from __future__ import annotations

from typing import Any

from grpo_infra.check import findings
from grpo_infra.ports import MIN_BLOCK_SIZE, WORKER_OFFSET, block_size, ray_ports, worker_ports_needed
from grpo_infra.slurmgen import render_files
from tests.slurm.variants import stack, variant


def _pool(cpus: int, start: int, end: int) -> Any:
    def edit(data: dict[str, Any]) -> None:
        for pool in data["pools"]:
            pool["cpus"] = cpus
        data["slurm"].pop("nodeLayouts", None)
        data["slurm"]["rayPorts"] = {"start": start, "end": end}

    return edit


def _block_lines(env: Any) -> list[str]:
    return [f"{v.where}: {v.message}" for v in findings(env) if v.rule == "slurm-ports-block"]


def test_a_224_cpu_node_gets_a_worker_port_for_every_worker_ray_may_hold() -> None:
    # onprem-slurm's H100 nodes: 224 CPUs (2 x 56 cores x 2 threads), 8 GPUs. Ray prestarts one worker
    # per CPU; the old fixed block had 240 worker ports, fewer than the 224 + 8 + 8 + 8 + 4 that may hold one.
    env = stack("onprem-slurm")
    pool = env.gang.pool
    assert (pool.cpus, pool.gpu.per_node) == (224, 8)
    assert worker_ports_needed(224, 8) == 252 > MIN_BLOCK_SIZE - WORKER_OFFSET
    assert pool.ray_block_size == block_size(224, 8) == 320
    assert env.slurm is not None
    r = env.slurm.ray_ports
    ports = ray_ports(r.start, r.end, 0, pool.ray_block_size)
    assert ports.max_worker - ports.min_worker + 1 >= worker_ports_needed(224, 8)
    # The sbatch hands Ray the same worker range.
    sbatch = render_files(env)["slurm/grpo.sbatch"]
    assert "GRPO_RAY_MAX_WORKER_PORT=$(( ray_port_base + 319 ))" in sbatch
    assert "ray_port_base=$(( 20000 + ($1 % 39) * 320 ))" in sbatch


def test_small_nodes_keep_the_smallest_block() -> None:
    assert block_size(4, 1) == MIN_BLOCK_SIZE
    assert block_size(192, 8) == MIN_BLOCK_SIZE  # p5.48xlarge: 16 fixed + 192 + 8 + 20 = 236
    assert block_size(208, 8) == MIN_BLOCK_SIZE  # a3-highgpu-8g: 16 + 208 + 8 + 20 = 252
    assert block_size(212, 8) == MIN_BLOCK_SIZE  # 256: the last that fits
    assert block_size(213, 8) == MIN_BLOCK_SIZE + 64


def test_a_range_smaller_than_the_pools_block_is_refused_in_one_line() -> None:
    env = variant("local-slurm", _pool(224, 20000, 20255))
    (line,) = _block_lines(env)
    assert line == (
        "grpo-infra:environment.slurm.rayPorts: 20000-20255 holds 256 ports, less than one job's block of 320 "
        f"that pool {env.gang.pool.name}'s nodes need (224 CPUs, {env.gang.pool.gpu.per_node} GPUs: 16 fixed "
        f"ports and {worker_ports_needed(224, env.gang.pool.gpu.per_node)} worker ports); widen the range"
    )
    assert _block_lines(variant("local-slurm", _pool(224, 20000, 20319))) == []
    assert _block_lines(stack("onprem-slurm")) == []
