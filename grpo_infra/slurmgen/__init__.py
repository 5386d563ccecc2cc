"""Slurm renderers: spec → slurm.conf / gres.conf fragments and the sbatch script."""

from __future__ import annotations

from ..spec import Environment


def render_files(env: Environment) -> dict[str, str]:
    """`slurm/<file>` for every Slurm file of the stack."""
    return {}
