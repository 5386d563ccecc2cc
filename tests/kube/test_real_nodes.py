"""The local cluster with real nodes: each pool host and the CPU nodes a kubelet v1.36.3 with its own
containerd, Ready; its GPUs advertised by the device plugin and allocated to containers; pods
reachable across nodes by address and by Service name through the cluster DNS; host sysctls
untouched while it runs; and after `kube down`, nothing of it left on this machine.

It runs on the session's cluster of tests/kube/test_job_real.py (`job_cluster`: two CPU nodes, the stack's
image and the tools image), after that module, and its last test takes the cluster down: what this module
leaves (its pods, a killed node) goes with it.

Needs root, containerd, runc, the CNI plugins, dnsmasq and the built kubelet: skipped on a
developer's machine without them (with the reason), failed under CI, which installs them."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.k8s.placement import node_taints
from grpo_infra.kube import cluster, nodeimages, realnodes
from grpo_infra.kube.nodes import real_nodes
from grpo_infra.kube.plan import CPU_NODE, MANAGED_BY, Paths, cpu_node_names, pool_hosts
from grpo_infra.kube.versions import KUBERNETES

from . import hoststate
from .conftest import LocalClusters, get, local_k8s, wait_until
from .test_job_real import CPU_NODES, job_cluster

pytestmark = pytest.mark.cluster("real-nodes")

ENV = local_k8s()
POOL = ENV.pools[0]
GPU_NODE = pool_hosts(POOL)[0]
assert cpu_node_names(2) == CPU_NODES and CPU_NODES[0] == CPU_NODE


@pytest.fixture(scope="module")
def kube(local_clusters: LocalClusters) -> Paths:
    return job_cluster(local_clusters)


@pytest.fixture(scope="module")
def before(kube: Paths, local_clusters: LocalClusters) -> dict[str, object]:
    """This machine as it was before the cluster's real nodes booted."""
    return local_clusters.host_before


def pod(name: str, node: str, command: list[str], **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": nodeimages.TOOLS_REF,
        "imagePullPolicy": "Never",
        "command": command,
        **extra,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
            "restartPolicy": "Never",
        },
    }


def running(paths: Paths, name: str) -> bool:
    return get(paths, "pod", name, "-n", "default")["status"].get("phase") == "Running"


def test_every_pool_host_and_cpu_node_is_a_ready_kubelet_with_containerd(kube: Paths) -> None:
    nodes = {n["metadata"]["name"]: n for n in get(kube, "nodes")["items"]}
    assert sorted(nodes) == sorted([*pool_hosts(POOL), *CPU_NODES])
    for name, node in nodes.items():
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == KUBERNETES, name
        assert info["containerRuntimeVersion"].startswith("containerd://"), name
        assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {}), name
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", (name, ready)
        assert node["metadata"]["labels"].items() >= MANAGED_BY.items()


def test_gpus_come_from_the_device_plugin_with_the_pools_labels_and_taints(kube: Paths) -> None:
    for host in pool_hosts(POOL):
        node = get(kube, "node", host)
        assert node["status"]["capacity"][POOL.gpu.resource] == str(POOL.gpu.per_node)
        assert node["status"]["allocatable"][POOL.gpu.resource] == str(POOL.gpu.per_node)
        assert node["metadata"]["labels"]["grpo-infra/pool"] == POOL.name
        taints = [{k: t[k] for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])]
        assert taints == node_taints(POOL)
    for name in CPU_NODES:
        cpu = get(kube, "node", name)
        assert POOL.gpu.resource not in cpu["status"]["capacity"], name
        assert not cpu["spec"].get("taints"), name


def test_a_container_is_allocated_the_gpus_it_asks_for(kube: Paths) -> None:
    gpus = {"limits": {POOL.gpu.resource: "3"}}
    cluster.apply(kube, [pod("gpu-user", GPU_NODE, ["sh", "-c", "env; sleep 3600"], resources=gpus)])
    wait_until(lambda: running(kube, "gpu-user"), 90, "the GPU pod running")
    env = cluster.kubectl(kube, "exec", "-n", "default", "gpu-user", "--", "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES")
    assert len(env.strip().split(",")) == 3, env
    node = get(kube, "node", GPU_NODE)
    # The scheduler counts them against the device plugin's allocatable: a pod asking for more waits.
    too_many = {"limits": {POOL.gpu.resource: str(POOL.gpu.per_node)}}
    spec = pod("gpu-too-many", GPU_NODE, ["sleep", "3600"], resources=too_many)
    del spec["spec"]["nodeName"]
    spec["spec"]["nodeSelector"] = {"kubernetes.io/hostname": GPU_NODE}
    cluster.apply(kube, [spec])
    reason = wait_until(
        lambda: next(
            (
                c.get("reason")
                for c in get(kube, "pod", "gpu-too-many", "-n", "default")["status"].get("conditions", [])
            ),
            None,
        ),
        60,
        "the over-asking pod's scheduling condition",
    )
    assert reason == "Unschedulable"
    assert node["status"]["allocatable"][POOL.gpu.resource] == str(POOL.gpu.per_node)
    cluster.kubectl(
        kube, "delete", "pod", "-n", "default", "gpu-user", "gpu-too-many", "--grace-period=0", "--wait=false"
    )


def test_pods_reach_each_other_across_nodes_by_address_and_by_service_name(kube: Paths) -> None:
    server = pod(
        "web",
        GPU_NODE,
        ["sh", "-c", "echo served-by-$(hostname) > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"],
        readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        # Headless, like KubeRay's head Service: the name resolves to the pod's own address.
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]},
    }
    client = pod("client", CPU_NODE, ["sleep", "3600"])
    cluster.apply(kube, [server, service, client])
    wait_until(lambda: running(kube, "web") and running(kube, "client"), 90, "both pods running")
    web_ip = get(kube, "pod", "web", "-n", "default")["status"]["podIP"]
    web_node = next(n for n in real_nodes(ENV) if n.name == GPU_NODE)
    assert ipaddress.ip_address(web_ip) in ipaddress.ip_network(web_node.pod_cidr)

    def fetch(host: str) -> str:
        """The page, over a plain TCP connection from the client pod (busybox nc)."""
        get_page = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 {host} 8080'
        proc = cluster.run_kubectl(kube, "exec", "-n", "default", "client", "--", "sh", "-c", get_page, check=False)
        return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""

    assert wait_until(lambda: fetch(web_ip) == "served-by-web", 30, "the web pod by address")
    for name in ("web", "web.default.svc.cluster.local"):
        assert wait_until(lambda n=name: fetch(n) == "served-by-web", 30, f"{name} by DNS")
    lookup = cluster.run_kubectl(
        kube, "exec", "-n", "default", "client", "--", "nslookup", "web.default.svc.cluster.local", check=False
    ).stdout
    assert web_ip in lookup
    # The API server reaches the kubelets by address (logs, exec), never looking a node's name up.
    logs = cluster.run_kubectl(kube, "logs", "-n", "default", "web", check=False)
    assert logs.returncode == 0, logs.stderr


def test_the_host_sysctls_stay_as_they_were_while_nodes_run(kube: Paths, before: dict[str, object]) -> None:
    assert hoststate.sysctls() == before["sysctls"]


def test_kube_status_shows_real_nodes_and_pods(kube: Paths) -> None:
    text = cluster.status()
    assert "real nodes" in text
    assert GPU_NODE in text and "Ready" in text
    assert "client" in text  # the pods, with their nodes


def test_a_killed_node_dies_like_a_machine_and_goes_not_ready(kube: Paths) -> None:
    """kill_node: kubelet, containerd, shims, device plugin and containers SIGKILLed at once; the
    control plane notices only by the missing heartbeats, as with a machine that lost power."""
    victim = pool_hosts(POOL)[-1]
    sleeper = pod("on-victim", victim, ["sleep", "3600"])
    cluster.apply(kube, [sleeper])
    wait_until(lambda: running(kube, "on-victim"), 90, "a pod running on the victim")
    assert realnodes.cgroup_pids(victim), "the pod's container runs in the victim's cgroups"
    killed = realnodes.kill_node(victim)
    assert killed
    assert realnodes.node_pids(victim) == []
    others = [n for n in (*pool_hosts(POOL), *CPU_NODES) if n != victim]
    assert all(realnodes.node_pids(n) for n in others), "the other nodes live on"

    def ready_status() -> str:
        node = get(kube, "node", victim)
        return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")

    wait_until(lambda: ready_status() == "Unknown", 150, f"{victim} NotReady (heartbeats stopped)")


def test_kube_down_leaves_nothing_behind(kube: Paths, before: dict[str, object], local_clusters: LocalClusters) -> None:
    """Last in this module: the session's cluster (with running containers, a killed node) is taken down,
    and every trace a real node leaves is checked one by one against the state before its `kube up`."""
    state = json.loads(Path(kube.state).read_text())
    assert state["nodes_mode"] == "real"
    assert realnodes.cgroup_pids(), "containers ran in the nodes' cgroups before down"
    cluster.down()
    local_clusters.close()  # the session's hold on it too: the job's host paths, the machine lock
    after = hoststate.snapshot()
    for item in before:
        assert after[item] == before[item], item
