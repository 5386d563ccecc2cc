"""The local Slurm sandbox: a real multi-node Slurm cluster on one machine, built from a stack's rendered files."""

from .cluster import (
    boot_node,
    down,
    env_exports,
    export_logs,
    kill_node,
    load_state,
    missing_packages,
    namespace_pids,
    node_states,
    require_root_and_tools,
    slurm_env,
    start_node,
    status,
    up,
)
from .plan import ROOT, Plan, SandboxError, make_plan, node_names, resize_note, sandbox_environment

__all__ = [
    "ROOT",
    "Plan",
    "SandboxError",
    "boot_node",
    "down",
    "env_exports",
    "export_logs",
    "kill_node",
    "load_state",
    "make_plan",
    "missing_packages",
    "namespace_pids",
    "node_names",
    "node_states",
    "require_root_and_tools",
    "resize_note",
    "sandbox_environment",
    "slurm_env",
    "start_node",
    "status",
    "up",
]
