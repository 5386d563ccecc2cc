"""GPU pools: the single source of truth for capacity, placement and fabric."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Literal

import hostlist
from pydantic import AwareDatetime, Field, StringConstraints, model_validator

from ..ports import block_size
from .base import DnsLabel, PositiveInt, ResourceName, SpecModel
from .providers import EFA_INTERFACES, GKE_GPU_TAINT, efa_interfaces
from .strings import DisplayName, Hostlist

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


# The model name of GPUs that are only advertised, with no CUDA device behind them (the local clusters:
# the Slurm sandbox's device files, the local Kubernetes nodes' device plugin). The CPU image variant
# and the probe are for these (grpo_infra/check/stand_in_rules.py).
PLACEHOLDER_GPU = "placeholder"


class Gpu(SpecModel):
    """The accelerator of a pool."""

    model: DisplayName = Field(description="Marketing model, e.g. H100-80GB; used in docs and Slurm node Features.")
    resource: ResourceName = Field(
        default="nvidia.com/gpu", description="Kubernetes extended resource the device plugin advertises."
    )
    gres_type: GresType = Field(description="Slurm GRES type, as in Gres=gpu:<type>:<count>.")
    per_node: Annotated[int, Field(ge=1, le=16)]
    """GPUs per node; verl's `trainer.n_gpus_per_node`."""


class Taint(SpecModel):
    """A node taint; the pool's pods and flavor tolerate exactly these."""

    key: LabelKey
    """Taint key."""
    value: LabelValue | None = None
    """Taint value; none for a key-only taint."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    """Taint effect."""


class Fabric(SpecModel):
    """The inter-node fabric NCCL should use, and how a pod or job reaches it."""

    kind: Literal["infiniband", "roce", "efa", "none"]
    """Inter-node fabric; decides NCCL's environment, the fabric resource and the expected bus bandwidth."""
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

    @property
    def verbs(self) -> bool:
        """InfiniBand or RoCE: NCCL's IB transport over libibverbs and the HCAs in `hcas` (EFA goes through
        libfabric instead)."""
        return self.kind in ("infiniband", "roce")

    @model_validator(mode="after")
    def _consistent(self) -> Fabric:
        if self.verbs and not self.hcas:
            raise ValueError(f"a {self.kind} fabric needs `hcas` (the RDMA devices NCCL should use, e.g. mlx5_0)")
        if self.kind == "efa" and self.devices_per_node < 1:
            raise ValueError("an efa fabric needs `devicesPerNode` ≥ 1 (EFA interfaces of the instance type)")
        if self.kind == "none" and (self.hcas or self.resource or self.devices_per_node):
            raise ValueError("fabric kind `none` takes no `hcas`, `resource` or `devicesPerNode`")
        if self.resource and self.devices_per_node < 1:
            raise ValueError("a fabric `resource` needs `devicesPerNode` ≥ 1 (how many each node advertises)")
        return self


# EC2 begins terminating a Capacity Block's instances 30 minutes before it ends
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html); Auto Scaling asks to
# scale in to zero more than 30 minutes before the end
# (https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html).
EC2_TERMINATION_LEAD_MINUTES = 30


class CapacityBlock(SpecModel):
    """The window of a Capacity Block for ML: the node group scales to the pool's size at `start` and to 0
    `scaleInMinutes` before `end`, and the job is told when that is."""

    start: AwareDatetime
    """When the block starts (UTC, as `aws ec2 describe-capacity-reservations` shows StartDate)."""
    end: AwareDatetime
    """When the block ends (EndDate)."""
    scale_in_minutes: Annotated[int, Field(gt=EC2_TERMINATION_LEAD_MINUTES, le=24 * 60)] = Field(
        default=60,
        description="Scale the node group to 0 this long before `end` (more than the 30 minutes before the end at "
        "which EC2 starts terminating the block's instances), so verl's last checkpoint and the drain finish first.",
    )
    checkpoint_save_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=300,
        description="Longest a checkpoint save takes; verl is told the scale-in time less this, and saves once "
        "more when that is less than its longest step away.",
    )

    @model_validator(mode="after")
    def _window(self) -> CapacityBlock:
        if self.end <= self.start:
            raise ValueError("capacityBlock.end must be after capacityBlock.start")
        if self.scale_in_at <= self.start:
            raise ValueError(
                f"capacityBlock: scaling in {self.scale_in_minutes} minutes before the end leaves no time in the block"
            )
        return self

    @property
    def scale_in_at(self) -> datetime:
        """When the node group scales to 0: the end of the usable window."""
        return self.end - timedelta(minutes=self.scale_in_minutes)


class EksNodes(SpecModel):
    """How an EKS managed node group provides this pool."""

    instance_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+[a-z0-9-]*\.[a-z0-9]+$")]
    """EC2 instance type, e.g. p5.48xlarge."""
    subnet_ids: list[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]+$")]] = Field(
        min_length=1, description="Subnets of ONE availability zone (an EFA pool: exactly one subnet)."
    )
    capacity_reservation_id: Annotated[str, StringConstraints(pattern=r"^cr-[0-9a-f]+$")] | None = None
    """EC2 capacity reservation (an On-Demand Capacity Reservation or a Capacity Block) the node group launches into."""
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"] = Field(
        default="ON_DEMAND",
        description="The node group's capacity type: `CAPACITY_BLOCK` for a Capacity Block for ML (p5 reservations "
        "usually are), which also sets the launch template's market type `capacity-block`.",
    )
    capacity_block: CapacityBlock | None = Field(
        default=None,
        description="`CAPACITY_BLOCK` only: the block's start and end. The node group is created at 0 nodes and "
        "scheduled actions on its Auto Scaling group scale it to the pool's size at the start and to 0 before the end.",
    )
    max_pods: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        default=None,
        description="The kubelet's maxPods, when the instance type is not in the project's table or nodeadm's "
        "`maxPodsExpression` changes it; decides the kubelet's memory reservation.",
    )
    node_role_arn: (
        Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$")] | None
    ) = Field(
        default=None,
        description="IAM role the nodes run as; `pulumi up` needs it to create the node group.",
    )
    security_group_ids: list[Annotated[str, StringConstraints(pattern=r"^sg-[0-9a-f]+$")]] = Field(
        default_factory=list,
        description="Security groups of the EFA interfaces (usually the cluster security group); needed for EFA.",
    )
    release_version: Annotated[str, StringConstraints(pattern=r"^1\.\d+\.\d+-\d{8}$")] | None = Field(
        default=None,
        description="The EKS-optimized AL2023 NVIDIA AMI release the node group runs, as EKS names it "
        "(`<kubernetes version>-<YYYYMMDD>`, e.g. 1.34.1-20251023); it decides the NVIDIA driver. Unset: the "
        "newest release when the node group is created, kept until it is updated. `check` refuses a release "
        "whose driver is older than the image's CUDA needs.",
    )

    @model_validator(mode="after")
    def _capacity_type_matches_reservation(self) -> EksNodes:
        """EC2 launches into a Capacity Block only with market type capacity-block and the block's id, and a
        Spot node group cannot use a reservation (docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)."""
        if self.capacity_type == "CAPACITY_BLOCK" and self.capacity_reservation_id is None:
            raise ValueError("capacityType CAPACITY_BLOCK needs the block's id in `capacityReservationId` (cr-...)")
        if self.capacity_type == "CAPACITY_BLOCK" and self.capacity_block is None:
            raise ValueError(
                "capacityType CAPACITY_BLOCK needs the block's window in `capacityBlock` {start, end}: EC2 launches "
                "nothing before the start and terminates the instances at the end"
            )
        if self.capacity_type == "SPOT" and self.capacity_reservation_id is not None:
            raise ValueError(
                "a SPOT node group cannot launch into capacity reservation " + self.capacity_reservation_id
            )
        if self.capacity_type != "CAPACITY_BLOCK" and self.capacity_block is not None:
            raise ValueError("`capacityBlock` is for capacityType CAPACITY_BLOCK only")
        return self


class GkeNodes(SpecModel):
    """How a GKE node pool provides this pool."""

    machine_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    """GCE machine type, e.g. a3-highgpu-8g."""
    accelerator_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    """GPU type of guest_accelerators, e.g. nvidia-h100-80gb."""
    zone: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z0-9]+-[a-z]$")]
    """The one zone of the node pool (compact placement)."""
    reservation: (
        Annotated[
            str, StringConstraints(pattern=r"^(projects/[a-z][-a-z0-9]*/reservations/)?[a-z]([-a-z0-9]*[a-z0-9])?$")
        ]
        | None
    ) = Field(
        default=None,
        description="Compute Engine reservation the nodes consume (SPECIFIC_RESERVATION): its name, or "
        "`projects/<project>/reservations/<name>` for a shared one; A3 capacity is usually only there.",
    )
    auto_upgrade: bool = Field(
        default=False,
        description="Let GKE upgrade the pool's nodes (it drains them, killing a multi-day run). Must be true on a "
        "release-channel cluster; then the cluster needs a maintenance exclusion covering the run "
        "(`maintenanceExclusion`).",
    )
    maintenance_exclusion: bool = Field(
        default=False,
        description="The cluster has a `no_minor_or_node_upgrades` maintenance exclusion covering the run; "
        "required when `autoUpgrade` is true.",
    )
    cluster_location: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z0-9]+(-[a-z])?$")] | None = Field(
        default=None, description="The cluster's region or zone; default: the region of `zone` (a regional cluster)."
    )
    gpu_driver_version: Literal["DEFAULT", "LATEST", "INSTALLATION_DISABLED"] | None = Field(
        default=None,
        description="Which NVIDIA driver GKE installs on the nodes; default: LATEST when the image's CUDA needs an "
        "R570 driver or newer (GKE's DEFAULT trails it), else DEFAULT. INSTALLATION_DISABLED: you install it.",
    )

    @model_validator(mode="after")
    def _upgrades_guarded(self) -> GkeNodes:
        if self.auto_upgrade and not self.maintenance_exclusion:
            raise ValueError(
                "autoUpgrade: true lets GKE drain the nodes mid-run; declare the cluster's maintenance exclusion "
                "(`maintenanceExclusion: true`) or set autoUpgrade: false"
            )
        return self


class ExistingNodes(SpecModel):
    """Options for a pool of machines an existing cluster already has."""

    install_gpu_operator: bool = Field(
        default=False, description="Install the NVIDIA GPU operator (device plugin, toolkit) from its chart."
    )
    operator_installs_driver: bool = Field(
        default=False, description="Let the GPU operator install the NVIDIA driver (off: drivers are preinstalled)."
    )
    install_rdma_device_plugin: bool = Field(
        default=False,
        description="Install the RDMA shared device plugin, advertising `fabric.resource` (rdma/<name>) from the "
        "pool's `fabric.hcas`.",
    )


class Pool(SpecModel):
    """A set of identical GPU nodes.

    Size is given once: either `nodes` (a cloud node group of that many nodes) or `hosts` (the
    hostlist of existing machines, whose length is the size).
    """

    name: DnsLabel
    """Pool name: the Slurm node Feature, the flavor and worker group name."""
    gpu: Gpu
    nodes: PositiveInt | None = None
    """Node count of a cloud pool (EKS, GKE)."""
    hosts: Hostlist | None = None
    """Hostlist of an existing cluster's or Slurm pool's machines; its length is the size."""
    cpus: Annotated[int, Field(ge=1, le=4096)]
    """CPUs per node."""
    memory_gib: Annotated[int, Field(ge=1, le=65536)]
    """Memory per node, GiB: the machine's nominal size."""
    kernel_memory_gib: Annotated[float, Field(gt=0, le=65536)] | None = Field(
        default=None,
        description="The kubelet's memory capacity of one node as measured there (`kubectl get node -o "
        "jsonpath='{.status.capacity.memory}'`, the kernel's MemTotal), GiB; default: the project's measured "
        "table for the machine type, or the nominal size less 3.5 % (docs/node-pools.md).",
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Node labels: what the pool's pods select and its flavor matches."""
    taints: list[Taint] = Field(default_factory=list)
    """Node taints: what the pool's pods and flavor tolerate."""
    fabric: Fabric
    eks: EksNodes | None = None
    gke: GkeNodes | None = None
    existing: ExistingNodes | None = None

    @model_validator(mode="after")
    def _kernel_memory_below_nominal(self) -> Pool:
        if self.kernel_memory_gib is not None and self.kernel_memory_gib > self.memory_gib:
            raise ValueError(
                f"kernelMemoryGib {self.kernel_memory_gib:g} exceeds memoryGib {self.memory_gib}: the kernel sees "
                "less than the machine's nominal memory, never more"
            )
        return self

    @model_validator(mode="after")
    def _sized_once(self) -> Pool:
        if (self.nodes is None) == (self.hosts is None):
            raise ValueError("give exactly one of `nodes` (a count) or `hosts` (a hostlist); the size is derived")
        keys = [t.key for t in self.taints]
        if len(keys) != len(set(keys)):
            raise ValueError("a taint key appears twice")
        return self

    @model_validator(mode="after")
    def _cloud_nodes_consistent(self) -> Pool:
        """What the cloud's nodes will carry must be what the spec says they carry."""
        gpu_taint = next((t for t in self.taints if t.key == "nvidia.com/gpu" and t.effect == "NoSchedule"), None)
        if self.eks is not None:
            if gpu_taint is None:
                raise ValueError(
                    "an eks GPU pool carries the taint nvidia.com/gpu with effect NoSchedule, so that only GPU "
                    'workloads land on it: add {key: nvidia.com/gpu, value: "true", effect: NoSchedule} to `taints`'
                )
            if self.fabric.kind == "efa":
                known = efa_interfaces(self.eks.instance_type)
                if known is None:
                    raise ValueError(
                        f"eks.instanceType {self.eks.instance_type}: EFA interface count unknown; "
                        f"known EFA instance types: {', '.join(sorted(EFA_INTERFACES))}"
                    )
                if self.fabric.devices_per_node != known:
                    raise ValueError(
                        f"fabric.devicesPerNode is {self.fabric.devices_per_node}, but a {self.eks.instance_type} "
                        f"has {known} EFA interfaces"
                    )
                if self.fabric.resource != "vpc.amazonaws.com/efa":
                    raise ValueError("an efa fabric on eks is advertised as resource vpc.amazonaws.com/efa")
                if len(self.eks.subnet_ids) != 1:
                    raise ValueError(
                        "an EFA pool takes exactly one subnet in eks.subnetIds (EFA traffic stays in one subnet)"
                    )
        if self.gke is not None:
            key, value, effect = GKE_GPU_TAINT
            if not any((t.key, t.value, t.effect) == GKE_GPU_TAINT for t in self.taints):
                raise ValueError(
                    f"a gke GPU node carries the taint {key}={value}:{effect} (GKE adds it); add "
                    f"{{key: {key}, value: {value}, effect: {effect}}} to `taints` so the gang tolerates it"
                )
            match = re.fullmatch(r"a\d+[a-z]*-[a-z]+-(\d+)g", self.gke.machine_type)
            if match and int(match.group(1)) != self.gpu.per_node:
                raise ValueError(
                    f"gke.machineType {self.gke.machine_type} has {match.group(1)} GPUs, but gpu.perNode is {self.gpu.per_node}"
                )
        return self

    @property
    def host_names(self) -> list[str]:
        """The pool's hosts, expanded; empty for cloud pools sized by count."""
        return hostlist.expand_hostlist(self.hosts) if self.hosts else []

    @property
    def ray_block_size(self) -> int:
        """Ports of a job's Ray block on these nodes, sized from their CPUs and GPUs (grpo_infra/ports.py)."""
        return block_size(self.cpus, self.gpu.per_node)

    @property
    def node_count(self) -> int:
        return self.nodes if self.nodes is not None else len(self.host_names)

    @property
    def gpu_count(self) -> int:
        return self.node_count * self.gpu.per_node
