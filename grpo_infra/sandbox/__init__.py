"""The local Slurm sandbox: a real multi-node Slurm cluster on one machine, built from a stack's rendered files."""

from .cluster import (
    down,
    env_exports,
    kill_node,
    load_state,
    missing_packages,
    namespace_pids,
    node_states,
    require_root_and_tools,
    sinfo,
    slurm_env,
    start_node,
    up,
)
from .plan import ROOT, Plan, SandboxError, make_plan, node_names, resize_note, sandbox_environment

__all__ = [
    "ROOT",
    "Plan",
    "SandboxError",
    "down",
    "env_exports",
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
    "sinfo",
    "slurm_env",
    "start_node",
    "up",
]
