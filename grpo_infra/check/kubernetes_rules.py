"""Kubernetes feasibility: the RayJob's gang against the queue's quota and the pool's nodes."""

from __future__ import annotations

from ..spec import Environment
from .violation import Violation


def kubernetes_violations(env: Environment) -> list[Violation]:
    return []
