"""Slurm feasibility: the job against its partition, and its Ray ports and interface against the nodes."""

from __future__ import annotations

from ..ports import block_count
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.slurm import time_limit_minutes
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
    ports = env.slurm.ray_ports if env.slurm else None
    assert ports is not None
    out = []
    low, high = max(ports.start, EPHEMERAL_PORTS[0]), min(ports.end, EPHEMERAL_PORTS[1])
    if low <= high:
        out.append(
            Violation(
                "slurm-ports-ephemeral",
                f"{SLURM}.rayPorts",
                f"ports {low}-{high} are in the kernel's ephemeral range {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}; "
                "a client socket can take one before Ray binds it",
                f"{high - low + 1} ports",
            )
        )
    if env.slurm and env.slurm.oversubscribe != "exclusive" and block_count(ports.start, ports.end) < 2:
        out.append(
            Violation(
                "slurm-ports-shared-nodes",
                f"{SLURM}.rayPorts",
                "nodes are shared between jobs, but the range holds one port block: two jobs would collide",
                "1 block",
            )
        )
    return out


def _interface(env: Environment) -> list[Violation]:
    slurm, pool = env.slurm, env.gang.pool
    assert slurm is not None
    if pool.fabric.interfaces and slurm.interface not in pool.fabric.interfaces:
        return [
            Violation(
                "slurm-interface",
                f"{SLURM}.interface",
                f"Ray and NCCL bind to {slurm.interface}, which is not an interface of pool {pool.name}'s fabric "
                f"({', '.join(pool.fabric.interfaces)})",
            )
        ]
    return []
