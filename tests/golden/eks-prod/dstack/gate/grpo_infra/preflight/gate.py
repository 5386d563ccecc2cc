"""The fabric gate's settings for one stack, derived once for both targets.

The Slurm sbatch and the RayJob entrypoint both run ``python -m grpo_infra.preflight.ray_allreduce``
before training; the arguments come from :func:`gate_settings` so that fabric, GPUs per node, node
count and expected bus bandwidth are never typed twice.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .calibration import gate_size_mib
from .verdict import default_expected_busbw

if TYPE_CHECKING:
    from ..spec import Environment

MODULE = "grpo_infra.preflight.ray_allreduce"


@dataclass(frozen=True)
class GateSettings:
    """What the in-job all-reduce gate runs and judges against (GB/s, MiB, seconds)."""

    enabled: bool
    fabric: str
    gpus_per_node: int
    nodes: int
    expected_busbw_gbps: float | None
    """The stack's `expectedBusbwGbps`, else the fabric's calibrated default; None for `none`."""
    fraction: float
    backend: str
    size_mib: int
    """The stack's `sizeMib`, else the size calibrated for the fabric (grpo_infra/preflight/calibration.py)."""
    iterations: int
    timeout_seconds: int

    @property
    def threshold_gbps(self) -> float | None:
        return None if self.expected_busbw_gbps is None else round(self.expected_busbw_gbps * self.fraction, 2)

    def argv(self) -> list[str]:
        """The program's arguments (without the interpreter and module)."""
        args = [
            "--fabric", self.fabric,
            "--gpus-per-node", str(self.gpus_per_node),
            "--nodes", str(self.nodes),
            "--backend", self.backend,
            "--fraction", f"{self.fraction:g}",
            "--size-mib", str(self.size_mib),
            "--iters", str(self.iterations),
            "--timeout", str(self.timeout_seconds),
        ]  # fmt: skip
        if self.expected_busbw_gbps is not None:
            args += ["--expected-busbw", f"{self.expected_busbw_gbps:g}"]
        return args

    def command(self, python: str = "python3", json_out: str | None = None) -> str:
        """One shell line running the gate on the Ray cluster this process can reach (exit 0 pass, 1 fail)."""
        args = [python, "-m", MODULE, *self.argv()]
        if json_out:
            args += ["--json-out", json_out]
        return shlex.join(args)


def gate_settings(env: Environment) -> GateSettings:
    """The gate of the stack's job: its gang (pool fabric, GPUs per node, nodes) and `job.preflight.nccl`;
    what the stack leaves out (size, expected busbw) is the fabric's calibration."""
    gang = env.gang
    spec = env.job.preflight.nccl
    fabric = gang.pool.fabric.kind
    expected = spec.expected_busbw_gbps
    if expected is None:
        expected = default_expected_busbw(fabric, gang.gpus_per_node, gang.nodes)
    return GateSettings(
        enabled=spec.enabled,
        fabric=fabric,
        gpus_per_node=gang.gpus_per_node,
        nodes=gang.nodes,
        expected_busbw_gbps=expected,
        fraction=spec.fraction,
        backend=spec.backend,
        size_mib=spec.size_mib if spec.size_mib is not None else gate_size_mib(fabric),
        iterations=spec.iterations,
        timeout_seconds=spec.timeout_seconds,
    )


def gate_command(env: Environment, python: str = "python3", json_out: str | None = None) -> str | None:
    """The shell line to run before training, or None when the stack switched the gate off."""
    settings = gate_settings(env)
    return settings.command(python, json_out) if settings.enabled else None
