"""GPU pools: the single source of truth for capacity, placement and fabric."""

from __future__ import annotations

from typing import Annotated, Literal

import hostlist
from pydantic import Field, StringConstraints, field_validator, model_validator

from .base import DnsLabel, PositiveInt, ResourceName, SpecModel

LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        max_length=316,
    ),
]
LabelValue = Annotated[str, StringConstraints(pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", max_length=63)]
# Slurm GRES type names (`Gres=gpu:<type>:<count>`): short, no colons or commas.
GresType = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=32)]


class Gpu(SpecModel):
    """The accelerator of a pool."""

    model: Annotated[str, StringConstraints(min_length=1)] = Field(
        description="Marketing model, e.g. H100-80GB; used in docs and Slurm node Features."
    )
    resource: ResourceName = Field(
        default="nvidia.com/gpu", description="Kubernetes extended resource the device plugin advertises."
    )
    gres_type: GresType = Field(description="Slurm GRES type, as in Gres=gpu:<type>:<count>.")
    per_node: Annotated[int, Field(ge=1, le=16)]


class Taint(SpecModel):
    """A node taint; the pool's pods and flavor tolerate exactly these."""

    key: LabelKey
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Fabric(SpecModel):
    """The inter-node fabric NCCL should use, and how a pod or job reaches it."""

    kind: Literal["infiniband", "roce", "efa", "none"]
    hcas: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$")]] = Field(
        default_factory=list, description="RDMA devices for NCCL_IB_HCA, e.g. mlx5_0."
    )
    interfaces: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$")]] = Field(
        default_factory=list, description="Network interfaces for NCCL_SOCKET_IFNAME and Ray."
    )
    resource: ResourceName | None = Field(
        default=None, description="Kubernetes resource exposing the fabric, e.g. rdma/ib or vpc.amazonaws.com/efa."
    )
    devices_per_node: int = Field(default=0, ge=0, le=64, description="Fabric devices per node (EFA interfaces, HCAs).")

    @model_validator(mode="after")
    def _consistent(self) -> Fabric:
        if self.kind in ("infiniband", "roce") and not self.hcas:
            raise ValueError(f"a {self.kind} fabric needs `hcas` (the RDMA devices NCCL should use, e.g. mlx5_0)")
        if self.kind == "efa" and self.devices_per_node < 1:
            raise ValueError("an efa fabric needs `devicesPerNode` ≥ 1 (EFA interfaces of the instance type)")
        if self.kind == "none" and (self.hcas or self.resource or self.devices_per_node):
            raise ValueError("fabric kind `none` takes no `hcas`, `resource` or `devicesPerNode`")
        if self.resource and self.devices_per_node < 1:
            raise ValueError("a fabric `resource` needs `devicesPerNode` ≥ 1 (how many each node advertises)")
        return self


class EksNodes(SpecModel):
    """How an EKS managed node group provides this pool."""

    instance_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+[a-z0-9-]*\.[a-z0-9]+$")]
    subnet_ids: list[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]+$")]] = Field(min_length=1)
    capacity_reservation_id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]+$")] | None = None


class GkeNodes(SpecModel):
    """How a GKE node pool provides this pool."""

    machine_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    accelerator_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    zone: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z0-9]+-[a-z]$")]
    reservation: str | None = None


class Pool(SpecModel):
    """A set of identical GPU nodes.

    Size is given once: either `nodes` (a cloud node group of that many nodes) or `hosts` (the
    hostlist of existing machines, whose length is the size).
    """

    name: DnsLabel
    gpu: Gpu
    nodes: PositiveInt | None = None
    hosts: Annotated[str, StringConstraints(min_length=1)] | None = None
    cpus: Annotated[int, Field(ge=1, le=4096)]
    memory_gib: Annotated[int, Field(ge=1, le=65536)]
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    fabric: Fabric
    eks: EksNodes | None = None
    gke: GkeNodes | None = None

    @field_validator("hosts")
    @classmethod
    def _hostlist_parses(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            names = hostlist.expand_hostlist(value)
        except hostlist.BadHostlist as exc:
            raise ValueError(f"not a Slurm hostlist such as gpu[001-016] ({exc})") from None
        if len(names) != len(set(names)):
            raise ValueError("the hostlist names a host twice")
        return value

    @model_validator(mode="after")
    def _sized_once(self) -> Pool:
        if (self.nodes is None) == (self.hosts is None):
            raise ValueError("give exactly one of `nodes` (a count) or `hosts` (a hostlist); the size is derived")
        keys = [t.key for t in self.taints]
        if len(keys) != len(set(keys)):
            raise ValueError("a taint key appears twice")
        return self

    @property
    def host_names(self) -> list[str]:
        """The pool's hosts, expanded; empty for cloud pools sized by count."""
        return hostlist.expand_hostlist(self.hosts) if self.hosts else []

    @property
    def node_count(self) -> int:
        return self.nodes if self.nodes is not None else len(self.host_names)

    @property
    def gpu_count(self) -> int:
        return self.node_count * self.gpu.per_node
