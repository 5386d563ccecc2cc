"""Slurm feasibility: the job against its partition, and its Ray ports and interface against the nodes."""

from __future__ import annotations

from ..ports import block_count
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.pools import Pool
from ..spec.slurm import PortRange, time_limit_minutes
from .violation import Violation

SLURM = f"{ENVIRONMENT_KEY}.slurm"
# Linux's default net.ipv4.ip_local_port_range: the kernel hands these out to outgoing connections,
# so a Ray port inside it can be taken by any client socket on the node before Ray binds it.
EPHEMERAL_PORTS = (32768, 60999)


def slurm_violations(env: Environment) -> list[Violation]:
    """Time against MaxTime, the port range against the kernel's ephemeral range, the interface against the fabric."""
    assert env.slurm is not None
    return [*_time(env), *_ports(env), *_interface(env)]


def _time(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    asked, allowed = time_limit_minutes(slurm.time_limit), time_limit_minutes(slurm.max_time)
    if asked <= allowed:
        return []
    return [
        Violation(
            "slurm-time-limit",
            f"{SLURM}.timeLimit",
            f"the job asks for {slurm.time_limit}; partition {slurm.partition} allows {slurm.max_time}: "
            "sbatch would leave it pending forever",
            f"{asked - allowed} minutes",
        )
    ]


def _ports(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    return port_range_violations(
        "slurm", slurm.ray_ports, f"{SLURM}.rayPorts", shared_nodes=slurm.oversubscribe != "exclusive"
    )


def port_range_violations(target: str, ports: PortRange, where: str, *, shared_nodes: bool) -> list[Violation]:
    """A Ray port range against the kernel's ephemeral range, and (nodes shared by jobs) against one block.

    Every target that starts Ray on machines of its own (Slurm, the launchers) uses this rule."""
    out = []
    low, high = max(ports.start, EPHEMERAL_PORTS[0]), min(ports.end, EPHEMERAL_PORTS[1])
    if low <= high:
        out.append(
            Violation(
                f"{target}-ports-ephemeral",
                where,
                f"ports {low}-{high} are in the kernel's ephemeral range {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}; "
                "a client socket can take one before Ray binds it",
                f"{high - low + 1} ports",
            )
        )
    if shared_nodes and block_count(ports.start, ports.end) < 2:
        out.append(
            Violation(
                f"{target}-ports-shared-nodes",
                where,
                "nodes are shared between jobs, but the range holds one port block: two jobs would collide",
                "1 block",
            )
        )
    return out


def _interface(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    return interface_violations("slurm", slurm.interface, env.gang.pool, f"{SLURM}.interface")


def interface_violations(target: str, interface: str, pool: Pool, where: str) -> list[Violation]:
    """Ray and NCCL bind to `interface`: it must be one of the pool's fabric interfaces when those are named."""
    if pool.fabric.interfaces and interface not in pool.fabric.interfaces:
        return [
            Violation(
                f"{target}-interface",
                where,
                f"Ray and NCCL bind to {interface}, which is not an interface of pool {pool.name}'s fabric "
                f"({', '.join(pool.fabric.interfaces)})",
            )
        ]
    return []
