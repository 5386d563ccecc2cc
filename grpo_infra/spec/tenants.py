"""Tenants: the teams that share the GPUs, each with its own queue and GPU quota."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import DnsLabel, SpecModel


class Tenant(SpecModel):
    """A team. On Kubernetes `name` is its namespace; on Slurm, its account."""

    name: DnsLabel
    """The team's namespace (Kubernetes) or account (Slurm)."""
    queue: DnsLabel = Field(description="LocalQueue (Kubernetes) or QOS (Slurm) the team submits to.")
    gpu_quota: Annotated[int, Field(ge=0)] = Field(description="GPUs this team may hold at once.")
