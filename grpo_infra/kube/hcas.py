"""What a GPU node of a pool with an InfiniBand or RoCE fabric tells the job about its HCAs, as a cloud or
bare-metal node does.

NCCL's IB transport, and the image guard at job start (grpo_infra/image/guard.py `verbs_devices`), list
HCAs through libibverbs' `ibv_get_device_list`. Where the kernel answers no RDMA netlink (as here, and in
any container without the rdma netlink family) libibverbs reads sysfs (rdma-core v44.0, the image's
Debian 12 package, libibverbs/init.c `find_sysfs_devs`, `setup_sysfs_dev`): every
`/sys/class/infiniband_verbs/uverbsN` with its `ibdev`, `dev` and `abi_version`, the HCA's
`/sys/class/infiniband/<ibdev>` with `node_type` and `device/modalias` (which the mlx5 provider matches,
providers/mlx5/mlx5.c `mlx5_hca_table`), and then `try_access_device`: a stat of
`/dev/infiniband/uverbsN`. A device whose character node is absent is left out.

So a container on a real node sees every HCA in sysfs (sysfs does not namespace RDMA devices) but lists
only the ones whose `/dev/infiniband/uverbsN` it was given, and it is given them by the RDMA device
plugin, only when it requests the pool's fabric resource (`rdma/roce`, `rdma/ib`): a container that does
not request it lists no HCA. A local GPU node presents both the same way:
- its sysfs entries to every container, by a `createContainer` hook (presented.py) that lays a read-only
  tmpfs over the container's `sys/class` holding the container's own class directories (bound back, so
  `/sys/class/net` is still its own network namespace's) and the node's `infiniband` and
  `infiniband_verbs`;
- its `uverbsN` character nodes (the uverbs major and minors, unopenable here: no kernel driver) to a
  container that is allocated the fabric resource, by the local device plugin (deviceplugin.py), as
  the RDMA shared device plugin hands every HCA's devices to a container holding its resource.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .presented import shell_hook


@dataclass(frozen=True)
class Verbs:
    """A GPU node's HCAs: the fabric kind, the resource whose holder is given their devices, their names
    (`mlx5_0`; a declared port, `mlx5_0:1`, names the same HCA)."""

    kind: str
    resource: str
    hcas: tuple[str, ...]

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(hca.split(":", 1)[0] for hca in self.hcas))


# Linux include/uapi/rdma/ib_user_verbs.h IB_USER_VERBS_ABI_VERSION (rdma-core v44.0 accepts 3..6,
# libibverbs/ibverbs.h), and mlx5's own (include/uapi/rdma/mlx5-abi.h MLX5_IB_UVERBS_ABI_VERSION, which
# providers/mlx5/mlx5-abi.h requires to be 1).
VERBS_ABI = 6
MLX5_ABI = 1
# drivers/infiniband/core/uverbs_main.c: IB_UVERBS_MAJOR 231, IB_UVERBS_BASE_MINOR 192.
UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192
# The kernel's node_type for an HCA (include/rdma/ib_verbs.h RDMA_NODE_IB_CA), as sysfs prints it.
NODE_TYPE_CA = "1: CA"
# A PCI modalias of a Mellanox HCA mlx5 matches: ConnectX-6 Dx (RoCE NICs), ConnectX-7 (InfiniBand).
MODALIAS = {
    "roce": "pci:v000015B3d0000101Dsv000015B3sd00000016bc02sc00i00",
    "infiniband": "pci:v000015B3d00001021sv000015B3sd00000041bc02sc07i00",
}
DEVICE_DIR = "/dev/infiniband"
# Lays a tmpfs over sys/class with the container's own class directories bound back, then the node's
# infiniband and infiniband_verbs ($0), all read-only.
HOOK = r"""set -e
keep=$(mktemp -d)
mount --bind sys/class "$keep"
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec grpo-sys-class sys/class
for entry in "$keep"/*; do
  name=${entry##*/}
  mkdir "sys/class/$name"
  mount --bind "$entry" "sys/class/$name"
done
umount -l "$keep"
rmdir "$keep"
for name in infiniband infiniband_verbs; do
  mkdir "sys/class/$name"
  mount --bind "$0/$name" "sys/class/$name"
  mount -o remount,bind,ro "sys/class/$name"
done
mount -o remount,ro sys/class
"""


def write_verbs_dir(base: Path, verbs: Verbs) -> Path:
    """The node's `verbs/infiniband/<hca>` and `verbs/infiniband_verbs/uverbsN`, one per HCA, as the
    kernel's sysfs shows them."""
    tree = base / "verbs"
    (tree / "infiniband_verbs").mkdir(parents=True, exist_ok=True)
    (tree / "infiniband_verbs" / "abi_version").write_text(f"{VERBS_ABI}\n")
    for index, hca in enumerate(verbs.devices):
        uverbs = tree / "infiniband_verbs" / f"uverbs{index}"
        uverbs.mkdir(exist_ok=True)
        (uverbs / "ibdev").write_text(f"{hca}\n")
        (uverbs / "dev").write_text(f"{UVERBS_MAJOR}:{UVERBS_BASE_MINOR + index}\n")
        (uverbs / "abi_version").write_text(f"{MLX5_ABI}\n")
        device = tree / "infiniband" / hca / "device"
        device.mkdir(parents=True, exist_ok=True)
        (tree / "infiniband" / hca / "node_type").write_text(f"{NODE_TYPE_CA}\n")
        (device / "modalias").write_text(f"{MODALIAS[verbs.kind]}\n")
    return tree


def write_device_nodes(base: Path, count: int) -> Path:
    """`base/dev-infiniband/uverbsN`: the character nodes the device plugin hands to a container holding
    the fabric resource (stat-able, like the real ones; opening them fails, there is no driver)."""
    devices = base / "dev-infiniband"
    devices.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        node = devices / f"uverbs{index}"
        if not node.exists():
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(UVERBS_MAJOR, UVERBS_BASE_MINOR + index))
    return devices


def verbs_hook(verbs_dir: Path) -> dict[str, Any]:
    """The hook presenting the node's HCAs in the container's /sys/class."""
    return shell_hook(HOOK, verbs_dir)
