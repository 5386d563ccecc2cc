"""Kubernetes target settings: where the cluster comes from and how gangs are admitted."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from .base import SpecModel


class NodeReserve(SpecModel):
    """What each node keeps back for the kubelet, system daemons and device plugins.

    Queue quotas are the pool's capacity minus this reserve on every node, so that an admitted
    gang always fits on the nodes.
    """

    cpus: Annotated[float, Field(ge=0)]
    memory_gib: Annotated[float, Field(ge=0)]


class Topology(SpecModel):
    """Node label keys for topology-aware scheduling, coarsest first."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = "gpu-topology"
    levels: list[Annotated[str, StringConstraints(min_length=1, max_length=316)]] = Field(min_length=1, max_length=16)

    @field_validator("levels")
    @classmethod
    def _ordered(cls, levels: list[str]) -> list[str]:
        if len(levels) != len(set(levels)):
            raise ValueError("topology levels must be unique")
        if "kubernetes.io/hostname" in levels[:-1]:
            raise ValueError("kubernetes.io/hostname may only be the last (finest) level")
        return levels


class Kubernetes(SpecModel):
    """A Kubernetes cluster that runs the gang through KubeRay and Kueue (or Volcano)."""

    provider: Literal["eks", "gke", "existing"]
    cluster_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    scheduler: Literal["kueue", "volcano"] = "kueue"
    node_reserve: NodeReserve
    topology: Topology | None = None
