"""NCCL's environment for the pool's fabric: which transport, which devices, which interfaces."""

from __future__ import annotations

from ..spec.pools import Pool


def nccl_env(pool: Pool) -> list[tuple[str, str]]:
    """Environment variables every GPU worker gets, in a stable order (a leading `=` means exact names)."""
    fabric = pool.fabric
    env: list[tuple[str, str]] = []
    if fabric.kind == "efa":
        # libfabric's EFA provider through the aws-ofi-nccl plugin, with GPUDirect RDMA.
        env += [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("FI_EFA_FORK_SAFE", "1")]
    elif fabric.kind in ("infiniband", "roce"):
        env += [("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", "=" + ",".join(fabric.hcas))]
        if fabric.kind == "roce":
            # RoCEv2 over IPv4 is GID index 3 on ConnectX NICs with the default GID table.
            env.append(("NCCL_IB_GID_INDEX", "3"))
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    if fabric.interfaces:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(fabric.interfaces)))
    return env
