"""With `network.mode: host` a worker's Ray ports are host ports: the job's block at `hostPortStart` is sized from
the pool's CPUs and GPUs like Slurm's (grpo_infra/ports.py), and `check` refuses a block that runs past port 65535
in one line naming the field."""

from __future__ import annotations

from typing import Any

from grpo_infra.check import findings
from grpo_infra.k8s import ray_job
from grpo_infra.k8s.network import PORTS_CONTAINER
from grpo_infra.ports import WORKER_OFFSET, worker_ports_needed

from .conftest import variant


def _host(start: int, cpus: int) -> Any:
    def edit(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": start}
        for pool in raw["pools"]:
            pool["cpus"] = cpus

    return edit


def test_a_224_cpu_worker_gets_the_sized_host_block_and_checks_all_of_it() -> None:
    env = variant("onprem-k8s", _host(20000, 224))
    assert env.gang.pool.ray_block_size == 320
    group = ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    params = group["rayStartParams"]
    # 16 fixed ports, then a worker port for each of the 224 + 8 + 20 processes Ray may hold (252), in a
    # block of 320 (the former fixed block of 256 had 240).
    assert (params["min-worker-port"], params["max-worker-port"]) == ("20016", "20319")
    assert int(params["max-worker-port"]) - int(params["min-worker-port"]) + 1 >= worker_ports_needed(224, 8)
    assert int(params["min-worker-port"]) == 20000 + WORKER_OFFSET
    (ports,) = [c for c in group["template"]["spec"]["initContainers"] if c["name"] == PORTS_CONTAINER]
    assert ports["command"][-2:] == ["20000", "20319"]


def test_a_host_block_past_the_last_port_is_refused_in_one_line() -> None:
    env = variant("onprem-k8s", _host(65280, 224))
    found = [f"{v.where}: {v.message}" for v in findings(env) if v.rule == "host-ports-block"]
    assert found == [
        "grpo-infra:environment.kubernetes.network.hostPortStart: the job's host port block 65280-65599 "
        f"(320 ports, sized from pool {env.gang.pool.name}'s 224 CPUs and 8 GPUs) runs past port 65535; "
        "start it at 65216 or below"
    ]
    fits = variant("onprem-k8s", _host(65216, 224))
    assert [v for v in findings(fits) if v.rule == "host-ports-block"] == []
