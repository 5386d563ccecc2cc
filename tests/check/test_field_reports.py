"""Field reports closed by construction or by `check`: EKS EFA pods and NCCL's socket fallback
(aws-samples/aws-do-eks #54, #63)."""

from __future__ import annotations

from typing import Any

from grpo_infra.check import violations
from grpo_infra.k8s import objects
from grpo_infra.k8s.network import SOCKET_FALLBACK
from grpo_infra.spec import Environment, load_stack
from tests.check.test_check import ROOT


def variant(stack: str, edit) -> Environment:
    data = load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True, mode="json")
    edit(data)
    return Environment.model_validate(data)


def worker_env(env: Environment) -> dict[str, str]:
    job = next(o for o in objects(env) if o["kind"] == "RayJob")
    container = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def host_network(data: dict[str, Any]) -> None:
    data["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 20000}


def rules(env: Environment) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in violations(env):
        out.setdefault(v.rule, []).append(v)
    return out


def test_no_shipped_pod_mounts_a_host_device() -> None:
    for stack in ("eks-prod", "gke-dev", "onprem-k8s", "local-k8s"):
        for obj in objects(load_stack(stack, ROOT).environment):
            text = repr(obj)
            assert "'path': '/dev/" not in text, (stack, obj["kind"])


def test_a_dev_infiniband_host_path_is_refused() -> None:
    def add(data: dict[str, Any]) -> None:
        data["kubernetes"]["volumes"].append(
            {"name": "ib", "mountPath": "/dev/infiniband", "hostPath": "/dev/infiniband"}
        )

    found = rules(variant("eks-prod", add))["device-hostpath"]
    assert {v.where for v in found} == {"grpo-infra:environment.kubernetes.volumes[2]"}
    assert "/dev/infiniband" in found[0].message


def test_a_link_local_interface_is_never_named() -> None:
    def pod_id_link(data: dict[str, Any]) -> None:
        host_network(data)
        data["pools"][0]["fabric"]["interfaces"] = ["pod-id-link0"]

    found = rules(variant("eks-prod", pod_id_link))["socket-interface-link-local"]
    assert found[0].where == "grpo-infra:environment.pools[0].fabric.interfaces"
    assert "pod-id-link0 is link-local" in found[0].message


def test_a_link_local_pod_interface_is_refused_where_it_is_set() -> None:
    found = rules(variant("gke-dev", lambda d: d["kubernetes"].update(network={"interface": "lo"})))
    assert found["socket-interface-link-local"][0].where == "grpo-infra:environment.kubernetes.network.interface"


def test_nothing_named_falls_back_to_every_routable_interface() -> None:
    env = variant("eks-prod", host_network)
    values = worker_env(env)
    assert values["NCCL_SOCKET_IFNAME"] == SOCKET_FALLBACK == "^lo,docker,pod-id-link,veth"
    assert "GLOO_SOCKET_IFNAME" not in values  # Gloo takes names, not exclusions
    assert "socket-interface-link-local" not in rules(env)


def test_efa_pods_fail_loudly_without_the_libfabric_plugin() -> None:
    values = worker_env(load_stack("eks-prod", ROOT).environment)
    assert values["NCCL_NET"] == "AWS Libfabric"
    assert values["NCCL_SOCKET_IFNAME"] == "=eth0"  # an exact name: no prefix can match pod-id-link0
