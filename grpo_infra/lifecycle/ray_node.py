"""`library(ports)`: the bash library of ray_node.sh.j2, rendered for a run's port block.

Rendering needs Jinja2 and the spec; the package's own `__init__` does not, because the resume rule
(`python3 -m grpo_infra.lifecycle.resume`) runs inside job images that hold grpo-infra without its
dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from ..ports import FIXED_OFFSETS, WORKER_OFFSET, block_count
from ..spec.slurm import PortRange
from .resume import CHECKPOINT_TRACKER

HERE = Path(__file__).parent
READY_PROGRAM = HERE / "ray_ready.py"
# The resume rule (identity and advance), self-contained: the sbatch and the launchers run it with `python3 -c`.
RESUME_PROGRAM = HERE / "resume.py"
STOP_ORDER_PROGRAM = HERE / "stop_order.py"


@cache
def shell_templates(package: str, folder: str = "templates") -> jinja2.Environment:
    """Jinja2 over a folder of shell-script templates: strict, unescaped, and with a comment marker
    that does not collide with bash (the Slurm templates, the launchers' scripts and this library share it).

    Templates are package data read through the package (`folder` inside `package`), never a path
    relative to a checkout, so an installed wheel renders exactly what the source tree does."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # `${#array[@]}` is everyday bash; Jinja's default `{#` comment marker would swallow it.
        comment_start_string="{##",
        comment_end_string="##}",
    )


@dataclass(frozen=True)
class PortVar:
    """One shell variable of the port block: `GRPO_RAY_<NAME>_PORT=$(( base + offset ))`."""

    name: str
    offset: int


def port_vars(block_size: int) -> list[PortVar]:
    """The port block's shell variables for blocks of `block_size` ports, from the one rule in grpo_infra/ports.py."""
    fixed = [PortVar(f"GRPO_RAY_{name.upper()}_PORT", offset) for name, offset in FIXED_OFFSETS.items()]
    return [
        *fixed,
        PortVar("GRPO_RAY_MIN_WORKER_PORT", WORKER_OFFSET),
        PortVar("GRPO_RAY_MAX_WORKER_PORT", block_size - 1),
    ]


# Seconds the readiness barrier waits for every node and GPU by default; GRPO_RAY_READY_TIMEOUT overrides it.
DEFAULT_READY_TIMEOUT_S = 300


def ephemeral_ports_function() -> str:
    """`ray_ports_clear`, the lifecycle's check of the node's ephemeral port range, alone: for the Kubernetes
    pods, whose `ray start` is KubeRay's (the library embeds the same text)."""
    return shell_templates("grpo_infra.lifecycle", "").get_template("ephemeral_ports.sh.j2").render()


def library(ports: PortRange, block_size: int, *, dashboard_default: int, debug_start_args: list[str]) -> str:
    """The lifecycle's bash functions for a stack whose Ray uses `ports`, in blocks of `block_size` ports
    (the pool's `ray_block_size`).

    `dashboard_default` is GRPO_RAY_DASHBOARD's default (the sbatch trains without the dashboard; the
    launchers submit through the Jobs API, which the dashboard serves); `debug_start_args` are
    `job.debug`'s extra `ray start` options (grpo_infra/debug.py)."""
    context: dict[str, Any] = {
        "port_start": ports.start,
        "port_end": ports.end,
        "port_blocks": block_count(ports.start, ports.end, block_size),
        "block_size": block_size,
        "port_vars": port_vars(block_size),
        "dashboard_default": dashboard_default,
        "debug_start_args": debug_start_args,
        "ready_program": READY_PROGRAM.read_text(encoding="utf-8").rstrip("\n"),
        "resume_program": RESUME_PROGRAM.read_text(encoding="utf-8").rstrip("\n"),
        "tracker": CHECKPOINT_TRACKER,
        "ready_timeout": DEFAULT_READY_TIMEOUT_S,
    }
    return shell_templates("grpo_infra.lifecycle", "").get_template("ray_node.sh.j2").render(**context).rstrip("\n")
