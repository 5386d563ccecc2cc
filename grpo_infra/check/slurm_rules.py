"""Slurm feasibility: the job's request against the partition, and its Ray ports against the range."""

from __future__ import annotations

from ..spec import Environment
from .violation import Violation


def slurm_violations(env: Environment) -> list[Violation]:
    return []
