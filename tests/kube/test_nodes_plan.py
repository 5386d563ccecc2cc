"""The real nodes' plan (no cluster needed): one per pool host plus the CPU node, each with its own
address and pod CIDR, the pool's labels, taints and devices; the kubelet's configuration; the
cluster DNS's records as the Kubernetes DNS specification names them; the mode `kube up` picks."""

from __future__ import annotations

import ipaddress

import pytest

from grpo_infra.k8s.placement import node_selector, node_taints
from grpo_infra.kube import cluster, dnsfeed, realnodes
from grpo_infra.kube.nodes import NodeDirs, bridge_address, kubelet_config, node_subnet, real_nodes
from grpo_infra.kube.plan import CPU_NODE, KubeError, pool_hosts

from .conftest import local_k8s


def test_one_node_per_pool_host_then_the_cpu_node_each_with_its_own_address_and_pod_cidr() -> None:
    env = local_k8s()
    pool = env.pools[0]
    nodes = real_nodes(env)
    assert [n.name for n in nodes] == [*pool_hosts(pool), CPU_NODE]
    subnet = node_subnet()
    assert len({n.address for n in nodes}) == len(nodes)
    assert all(ipaddress.ip_address(n.address) in subnet for n in nodes)
    assert bridge_address() not in {n.address for n in nodes}
    cidrs = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    assert not any(a.overlaps(b) for i, a in enumerate(cidrs) for b in cidrs[i + 1 :])
    gpu, cpu = nodes[0], nodes[-1]
    assert gpu.labels == node_selector(pool)
    assert list(gpu.taints) == node_taints(pool)
    assert gpu.devices == {pool.gpu.resource: pool.gpu.per_node}
    assert (cpu.labels, cpu.taints, cpu.devices) == ({}, (), {})


def test_a_second_cpu_node_is_another_untainted_node_with_its_own_address_and_pod_cidr() -> None:
    """`kube up --cpu-nodes 2`: room for a submitter apart from its head, nothing else changes."""
    env = local_k8s()
    one, two = real_nodes(env), real_nodes(env, cpu_nodes=2)
    assert [n.name for n in two] == [n.name for n in one] + ["grpo-cpu-1"]
    assert two[:-1] == one
    extra = two[-1]
    assert (extra.labels, extra.taints, extra.devices) == ({}, (), {})
    assert extra.address not in {n.address for n in one} and extra.pod_cidr not in {n.pod_cidr for n in one}


@pytest.mark.parametrize("count", [0, 5])
def test_a_cpu_node_count_out_of_range_is_one_line_and_starts_nothing(count: int) -> None:
    with pytest.raises(KubeError, match=f"1 to 4 CPU nodes, not {count}"):
        cluster.up("local-k8s", local_k8s(), cpu_nodes=count, root=cluster.ROOT / "never-made")
    assert not (cluster.ROOT / "never-made").exists()


def test_an_operators_mode_that_is_not_known_or_needs_real_nodes_is_one_line_and_starts_nothing() -> None:
    root = cluster.ROOT / "never-made"
    with pytest.raises(KubeError, match="operators must be one of auto, processes, charts, not 'pods'"):
        cluster.up("local-k8s", local_k8s(), operators="pods", root=root)
    # The charts' operators are pods: KWOK nodes run none, so nothing would ever serve their webhooks.
    with pytest.raises(KubeError, match="the operators' charts need real nodes"):
        cluster.up("local-k8s", local_k8s(), nodes="fake", operators="charts", root=root)
    assert not root.exists()


def test_the_operators_come_from_their_charts_on_real_nodes_unless_asked_otherwise() -> None:
    assert cluster.operator_mode("auto", "real") == "charts", "as on a cloud, where pods can run"
    assert cluster.operator_mode("auto", "fake") == "processes", "KWOK nodes start no pod"
    assert cluster.operator_mode("processes", "real") == "processes"
    with pytest.raises(KubeError, match="need root"):
        cluster.operator_mode("charts", "fake", "real nodes need root")


def test_the_kubelet_registers_the_pools_taints_and_uses_the_cluster_dns(tmp_path) -> None:
    env = local_k8s()
    node = real_nodes(env)[0]
    cfg = kubelet_config(node, NodeDirs(tmp_path), tmp_path / "ca.crt", bridge_address())
    assert cfg["registerWithTaints"] == node_taints(env.pools[0])
    assert cfg["clusterDNS"] == [bridge_address()]
    assert cfg["cgroupRoot"] == f"/grpo-kube/{node.name}"
    assert cfg["address"] == node.address
    assert cfg["authentication"]["anonymous"]["enabled"] is False


def test_dns_records_follow_the_specification_for_cluster_ips_and_headless_services() -> None:
    services = {
        "items": [
            {"metadata": {"name": "api", "namespace": "t"}, "spec": {"clusterIP": "10.96.0.7"}},
            {"metadata": {"name": "head", "namespace": "t"}, "spec": {"clusterIP": "None"}},
        ]
    }
    slices = {
        "items": [
            {
                "metadata": {"namespace": "t", "labels": {"kubernetes.io/service-name": "head"}},
                "endpoints": [
                    {"addresses": ["10.244.5.2"], "conditions": {"ready": True}, "hostname": "h0"},
                    {"addresses": ["10.244.6.2"], "conditions": {"ready": False}},
                ],
            },
            # A ClusterIP Service's endpoints are not published as its name.
            {
                "metadata": {"namespace": "t", "labels": {"kubernetes.io/service-name": "api"}},
                "endpoints": [{"addresses": ["10.244.1.9"]}],
            },
        ]
    }
    assert dnsfeed.records(services, slices) == [
        ("10.244.5.2", "h0.head.t.svc.cluster.local"),
        ("10.244.5.2", "head.t.svc.cluster.local"),
        ("10.96.0.7", "api.t.svc.cluster.local"),
    ]


def test_a_mode_that_is_not_known_is_refused_with_one_line() -> None:
    with pytest.raises(KubeError, match="--nodes must be one of auto, real, fake"):
        cluster.node_mode("virtual")


def test_auto_falls_back_to_fake_nodes_saying_why_and_real_refuses(monkeypatch) -> None:
    monkeypatch.setattr(realnodes.os, "geteuid", lambda: 1000)
    mode, why = cluster.node_mode("auto")
    assert mode == "fake" and why is not None and "need root" in why
    with pytest.raises(KubeError, match="need root"):
        cluster.node_mode("real")
    assert cluster.node_mode("fake") == ("fake", None)


def test_a_node_booted_again_waits_for_its_new_containerd_not_the_last_ones_socket(tmp_path) -> None:
    """A rebooted node (`kube boot-node`) keeps its disk, with the dead containerd's socket on it: the boot
    removes it before starting containerd, so the kubelet starts only once the new one listens."""
    from grpo_infra.kube.nodes import boot_script

    node = real_nodes(local_k8s())[-1]
    lines = boot_script(node, NodeDirs(tmp_path), containerd="containerd", kubelet=["kubelet"], device_plugin=None)
    lines = lines.splitlines()
    removed = lines.index("rm -f /run/containerd/containerd.sock")
    started = next(i for i, line in enumerate(lines) if line.startswith("containerd --config"))
    waited = next(i for i, line in enumerate(lines) if "containerd.sock ]" in line)
    kubelet = next(i for i, line in enumerate(lines) if line.startswith("exec kubelet"))
    assert removed < started < waited < kubelet
