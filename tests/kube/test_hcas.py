"""What a local node tells the job about its HCAs: a GPU node of an InfiniBand or RoCE pool shows every HCA
in its containers' /sys/class, read-only, as a real node's kernel does, and hands the uverbs character
nodes only to a container allocated the pool's fabric resource, as the RDMA device plugin does. libibverbs
lists an HCA only when both are there (rdma-core `find_sysfs_devs`, `try_access_device`), so a container
that checks HCAs without holding the fabric resource lists none, here as on the real node
(`grpo-infra rehearse onprem-k8s`, docs/rehearsal.md).

The containers run in real runc, through the wrapper the GPU nodes' containerd uses (needs root, runc, umoci)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grpo_infra.image.oci import run_in_container
from grpo_infra.kube import deviceplugin, hcas, nodeimages
from grpo_infra.kube.nodes import real_nodes
from grpo_infra.spec import load_stack

from .conftest import ROOT
from .test_gpu_driver import node_runc, wrapped_runc

READ = (
    "cat /sys/class/infiniband_verbs/abi_version /sys/class/infiniband_verbs/uverbs*/ibdev"
    " /sys/class/infiniband/mlx5_0/device/modalias && ls /sys/class/net"
    " && ! touch /sys/class/infiniband_verbs/x 2>/dev/null && ! mkdir /sys/class/x 2>/dev/null"
)


def test_the_roce_pools_nodes_present_its_hcas_and_cpu_nodes_none() -> None:
    nodes = real_nodes(load_stack("onprem-k8s", ROOT).environment, cpu_nodes=2)
    gpu = [n for n in nodes if n.devices]
    assert gpu and all(n.verbs is not None and n.verbs.resource == "rdma/roce" for n in gpu)
    assert {tuple(n.verbs.devices) for n in gpu if n.verbs} == {tuple(f"mlx5_{i}" for i in range(8))}
    assert all(n.verbs is None for n in nodes if not n.devices)
    assert all(n.verbs is None for n in real_nodes(load_stack("eks-prod", ROOT).environment))


def test_every_container_on_a_verbs_node_sees_its_hcas_in_sysfs_read_only_beside_its_own_classes(
    tmp_path: Path,
) -> None:
    verbs = hcas.Verbs("roce", "rdma/roce", ("mlx5_0", "mlx5_1:1"))
    runc = wrapped_runc(tmp_path, [hcas.verbs_hook(hcas.write_verbs_dir(tmp_path, verbs))])
    archive, ref = nodeimages.tools_archive(), nodeimages.TOOLS_REF.rsplit(":", 1)[-1]
    code, out = run_in_container(archive, ref, ["sh", "-c", READ], runc=runc, timeout=60)
    assert code == 0, out
    lines = out.split()
    assert lines[:3] == ["6", "mlx5_0", "mlx5_1"], out
    assert lines[3] == hcas.MODALIAS["roce"], out
    assert "lo" in lines[4:], out  # the container's own network namespace, bound back
    code, out = run_in_container(archive, ref, ["sh", "-c", READ], runc=node_runc(tmp_path / "cpu"), timeout=60)
    assert code != 0 and "infiniband_verbs" in out, out


def test_only_a_container_holding_the_fabric_resource_is_given_the_uverbs_devices(tmp_path: Path) -> None:
    devices = hcas.write_device_nodes(tmp_path, 2)
    for index, node in enumerate(sorted(devices.iterdir())):
        mode = os.stat(node)
        assert stat.S_ISCHR(mode.st_mode)
        assert (os.major(mode.st_rdev), os.minor(mode.st_rdev)) == (231, 192 + index)
    roce = deviceplugin.Plugin("rdma/roce", 8, tmp_path, (devices, hcas.DEVICE_DIR))
    request = deviceplugin.M["AllocateRequest"](
        container_requests=[deviceplugin.M["ContainerAllocateRequest"](devices_ids=["roce-0"])]
    )
    [given] = roce.allocate(request, None).container_responses
    assert [(d.container_path, d.host_path) for d in given.devices] == [
        ("/dev/infiniband/uverbs0", str(devices / "uverbs0")),
        ("/dev/infiniband/uverbs1", str(devices / "uverbs1")),
    ]
    gpu = deviceplugin.Plugin("nvidia.com/gpu", 8, tmp_path)
    [given] = gpu.allocate(request, None).container_responses
    assert list(given.devices) == []
