"""NCCL's and Gloo's environment for a pool's fabric: which transport, which devices, which interfaces.

Both targets call `nccl_env`: the RayJob's GPU workers and every process of the Slurm job get the same
variables for the same pool.
"""

from __future__ import annotations

from .spec.pools import Pool


def nccl_env(pool: Pool, interface: str | None = None) -> list[tuple[str, str]]:
    """Variables for the pool's fabric, in a stable order.

    `interface` is where sockets go when the fabric names no interfaces (the Slurm stack's Ray
    interface); a leading `=` tells NCCL to match names exactly rather than as prefixes.
    """
    fabric = pool.fabric
    env: list[tuple[str, str]] = []
    if fabric.kind == "efa":
        # libfabric's EFA provider through the aws-ofi-nccl plugin, with GPUDirect RDMA.
        env += [("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("FI_EFA_FORK_SAFE", "1")]
        # NCCL_NET names the one network NCCL may use, so a plugin that fails to load is an error instead of a
        # silent fall back to sockets (NCCL docs, env.html#nccl-net). aws-ofi-nccl up to 1.11 calls itself
        # "AWS Libfabric"; later releases call themselves "Libfabric" and still answer to the old name
        # (aws/aws-ofi-nccl#530).
        env.append(("NCCL_NET", "AWS Libfabric"))
    elif fabric.verbs:
        env += [("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", "=" + ",".join(fabric.hcas))]
        if fabric.kind == "roce":
            # RoCEv2 over IPv4 is GID index 3 on ConnectX NICs with the default GID table.
            env.append(("NCCL_IB_GID_INDEX", "3"))
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    interfaces = ",".join(fabric.interfaces) or interface
    if interfaces:
        env.append(("NCCL_SOCKET_IFNAME", "=" + interfaces))
        # Gloo (torch.distributed on CPU, verl's CPU collectives) takes plain names.
        env.append(("GLOO_SOCKET_IFNAME", interfaces))
    return env
