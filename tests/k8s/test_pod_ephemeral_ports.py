"""Every Ray pod checks, before `ray start`, its network namespace's ephemeral port range against its Ray
ports: the init container of the rendered RayJob, run for real in a namespace whose sysctls the test sets
(`unshare --net`, root), as a DGX node's host network or a pod's own network would have them."""

from __future__ import annotations

import shlex
from typing import Any

from grpo_infra.k8s import ray_job
from grpo_infra.k8s.network import POD_WORKER_PORTS, PORTS_CONTAINER
from tests.launchers.test_ephemeral_ports import _in_netns, pytestmark  # noqa: F401 (the same root-only gate)

from .conftest import env_of, variant


def _host(raw: dict[str, Any]) -> None:
    raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 20000}


def _ports_check(pod: dict[str, Any]) -> list[str]:
    (container,) = [c for c in pod["initContainers"] if c["name"] == PORTS_CONTAINER]
    assert container["env"] == [{"name": "GRPO_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    command = container["command"]
    assert command[:2] == ["bash", "-c"]
    return command


def _run(command: list[str], port_range: str) -> Any:
    return _in_netns(f"GRPO_NODE_NAME=gpu-node-7 {shlex.join(command)}", port_range)


def test_a_host_networked_worker_refuses_a_node_whose_range_holds_its_block() -> None:
    spec = ray_job(variant("onprem-k8s", _host))["spec"]["rayClusterSpec"]
    worker = spec["workerGroupSpecs"][0]["template"]["spec"]
    command = _ports_check(worker)
    assert command[4:] == ["20000", "20255"]  # the job's host block (128-CPU nodes: 256 ports)
    assert _run(command, "32768 60999").returncode == 0
    dgx = _run(command, "9000 65000")
    assert dgx.returncode == 1
    (line,) = dgx.stderr.splitlines()
    assert line.startswith(
        "grpo: ERROR: Ray's ports 20000-20255 overlap the ephemeral port range 9000-65000 of node gpu-node-7"
    )


def test_pods_on_a_pod_network_check_rays_default_worker_ports_in_their_own_namespace() -> None:
    spec = ray_job(env_of("onprem-k8s"))["spec"]["rayClusterSpec"]
    for pod in (spec["headGroupSpec"]["template"]["spec"], spec["workerGroupSpecs"][0]["template"]["spec"]):
        command = _ports_check(pod)
        assert tuple(map(int, command[4:])) == POD_WORKER_PORTS
        assert _run(command, "32768 60999").returncode == 0
        assert _run(command, "9000 65000").returncode == 1
