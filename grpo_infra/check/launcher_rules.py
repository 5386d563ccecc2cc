"""Launcher feasibility: each declared launcher's Ray ports and interface, by the rules Slurm uses; and
Ray port ranges that share hosts, within a stack and across the stacks of a project.

The gang's own rules (quota, verl's batch arithmetic) are target-independent and already apply; what a
launcher adds is where its Ray binds, judged by the same functions as `slurm.rayPorts` and
`slurm.interface`. Two launch paths whose Ray runs on the same machines (a Slurm stack and a hand-started
cluster on its nodes, two stacks naming the same hosts) each pick their block from their own range: when
the ranges overlap, job J of one and run R of the other can take the same ports and break both clusters
(docs/slurm.md, "Ports").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import hostlist

from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.slurm import PortRange
from .slurm_rules import interface_violations, port_range_violations
from .violation import Violation

LAUNCHERS = f"{ENVIRONMENT_KEY}.launchers"


def launcher_violations(env: Environment) -> list[Violation]:
    """Every declared launcher's ports and interface, and ranges of this stack sharing its hosts."""
    found = shared_host_violations(env, {})
    if env.launchers is None:
        return found
    pool = env.gang.pool
    for name in env.launchers.declared():
        launcher = getattr(env.launchers, name)
        where = f"{LAUNCHERS}.{name}"
        # Hand-started clusters share machines by design (one run id each); cloud nodes run one cluster.
        found += port_range_violations(name, launcher.ray_ports, f"{where}.rayPorts", pool, shared_nodes=name == "ray")
        if launcher.interface is not None:
            found += interface_violations(name, launcher.interface, pool, f"{where}.interface")
    found += dstack_fleet_violations(env)
    return found


def dstack_fleet_violations(env: Environment) -> list[Violation]:
    """An SSH fleet with fewer hosts than the gang has nodes: dstack never places the task (a multi-node
    task runs on one fleet, dstack 0.22.5), and says so only once the task waits for capacity."""
    if env.launchers is None or env.launchers.dstack is None:
        return []
    fleet = env.launchers.dstack.fleet
    if fleet is None or fleet.ssh is None or len(fleet.ssh.hosts) >= env.gang.nodes:
        return []
    hosts = len(fleet.ssh.hosts)
    return [
        Violation(
            "dstack-fleet-hosts",
            f"{LAUNCHERS}.dstack.fleet.ssh.hosts",
            f"fleet {fleet.name} has {hosts} host(s), the gang needs {env.gang.nodes}: the task would wait forever",
            by=f"{env.gang.nodes - hosts} host(s)",
        )
    ]


@dataclass(frozen=True)
class HostPorts:
    """A Ray port range used on named machines: the Slurm job's or the hand-started launcher's."""

    where: str
    hosts: frozenset[str]
    ports: PortRange


def host_port_ranges(env: Environment) -> list[HostPorts]:
    """Where this stack's Ray binds host ports on named machines. Kubernetes pods and the SkyPilot and
    dstack nodes (provisioned for the run) have ports of their own."""
    hosts = frozenset(env.gang.pool.host_names)
    if not hosts:
        return []
    out = []
    if env.target == "slurm" and env.slurm is not None:
        out.append(HostPorts(f"{ENVIRONMENT_KEY}.slurm.rayPorts", hosts, env.slurm.ray_ports))
    if env.launchers is not None and env.launchers.ray is not None:
        out.append(HostPorts(f"{LAUNCHERS}.ray.rayPorts", hosts, env.launchers.ray.ray_ports))
    return out


def _overlap(a: PortRange, b: PortRange) -> tuple[int, int] | None:
    low, high = max(a.start, b.start), min(a.end, b.end)
    return (low, high) if low <= high else None


def shared_host_violations(env: Environment, others: Mapping[str, Environment]) -> list[Violation]:
    """Ray port ranges that overlap on shared hosts: this stack's own pairs, then against each other stack."""
    mine = host_port_ranges(env)
    pairs = [(a, b, "") for i, a in enumerate(mine) for b in mine[i + 1 :]]
    for stack, other in sorted(others.items()):
        pairs += [(a, b, f"stack {stack}'s ") for a in mine for b in host_port_ranges(other)]
    found = []
    for a, b, owner in pairs:
        shared, ports = a.hosts & b.hosts, _overlap(a.ports, b.ports)
        if not shared or ports is None:
            continue
        found.append(
            Violation(
                "ray-ports-overlap",
                a.where,
                f"{a.ports.start}-{a.ports.end} overlaps {owner}{b.where} {b.ports.start}-{b.ports.end} on hosts "
                f"{hostlist.collect_hostlist(sorted(shared))}: their Ray clusters can take the same ports; "
                "give each its own range",
                f"{ports[1] - ports[0] + 1} ports",
            )
        )
    return found
