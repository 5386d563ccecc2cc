"""Launcher feasibility: each declared launcher's Ray ports and interface, by the rules Slurm uses.

The gang's own rules (quota, verl's batch arithmetic) are target-independent and already apply; what a
launcher adds is where its Ray binds, judged by the same functions as `slurm.rayPorts` and
`slurm.interface`.
"""

from __future__ import annotations

from ..spec import ENVIRONMENT_KEY, Environment
from .slurm_rules import interface_violations, port_range_violations
from .violation import Violation

LAUNCHERS = f"{ENVIRONMENT_KEY}.launchers"


def launcher_violations(env: Environment) -> list[Violation]:
    """Every declared launcher's ports and interface."""
    if env.launchers is None:
        return []
    pool = env.gang.pool
    found: list[Violation] = []
    for name in env.launchers.declared():
        launcher = getattr(env.launchers, name)
        where = f"{LAUNCHERS}.{name}"
        # Hand-started clusters share machines by design (one run id each); cloud nodes run one cluster.
        found += port_range_violations(name, launcher.ray_ports, f"{where}.rayPorts", shared_nodes=name == "ray")
        if launcher.interface is not None:
            found += interface_violations(name, launcher.interface, pool, f"{where}.interface")
    return found
