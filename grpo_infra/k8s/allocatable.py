"""What a node lets pods request: the memory the kernel shows, the provider's reservation, then the DaemonSets.

A pod that asks for more than a node's allocatable is admitted by Kueue (quota is arithmetic) and then
stays Pending; `waitForPodsReady` evicts and requeues the gang, again and again. So the worker's request
is derived from this, and `check` compares the rendered request with it.

- GKE: "Plan GKE Standard node sizes", memory and CPU reservations
  (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_cpu): memory 25% of
  the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128 GiB, plus a
  100 MiB eviction threshold; CPU 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4.
- EKS, AL2023 (nodeadm): awslabs/amazon-eks-ami@81fec2e8, nodeadm/internal/kubelet/config.go —
  `getCPUMillicoresToReserve` (same CPU tiers as GKE), `getMemoryMebibytesToReserve` = 11 MiB × maxPods
  + 255 MiB, `evictionHard memory.available: 100Mi`; maxPods = ENIs × (IPv4 per ENI − 1) + 2
  (eni_max_pods.go, `calculateStandardMaxPods`) from nodeadm/internal/kubelet/instance-info.jsonl.
- Existing clusters: the kubelet's configuration is the site's; `kubernetes.nodeReserve` states it.

Capacity is not the machine's nominal size. The kubelet's memory capacity is the kernel's MemTotal
(/proc/meminfo), which leaves out what firmware and the kernel keep before any process runs: above
all the `struct page` array, one 64-byte `struct page` for every 4 KiB page frame (1.56 %; Linux
Documentation/mm/vmemmap_dedup.rst works its x86-64 example with that 64-byte size; include/linux/mm_types.h),
plus the kernel image, firmware-reserved ranges and a crash kernel where configured. Measured on real
nodes that costs 1.6-3.5 % (`MEASURED_CAPACITY`). A pod sized from the nominal memory asks for more
than any node has: Kueue admits it by quota and it stays Pending ("Insufficient memory").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import Environment

GIB_MI = 1024
EVICTION_MEMORY_MI = 100
GIB = 2**30
# The kubelet's memory capacity (bytes) measured on real nodes, with where it was published.
_2I2C_2121 = "2i2c-org/infrastructure#2121 (GKE 1.25, kubectl get node)"
_2I2C_CAPACITY = (
    "2i2c-org/infrastructure@1097ae3c deployer/commands/generate/resource_allocation/node-capacity-info.json"
)
MEASURED_CAPACITY: dict[str, tuple[int, str]] = {
    "n2-highmem-4": (33669926912, _2I2C_CAPACITY),
    "n2-highmem-16": (131919220 * 1024, _2I2C_2121),
    "n2-highmem-32": (270473359360, _2I2C_CAPACITY),
    "n2-highmem-64": (528365196 * 1024, _2I2C_2121),
    "r5.xlarge": (33164840960, _2I2C_CAPACITY),
    "r5.4xlarge": (133523050496, _2I2C_CAPACITY),
    "r5.16xlarge": (535146246144, _2I2C_CAPACITY),
}
# Where no node of the type has been measured: this share of the nominal memory is taken as invisible to
# the kernel. The largest loss measured above on a machine of 128 GiB or more is r5.4xlarge's 2.85 %
# (EC2 Nitro loses more than GCE's 1.6-1.7 %); 3.5 % keeps 0.65 points below it. The struct page array
# alone is 1.56 % (`STRUCT_PAGE_SHARE`), so no x86-64 node can lose less than that.
UNMEASURED_MARGIN = 0.035
STRUCT_PAGE_SHARE = 64 / 4096
# (ENIs on the default network card, IPv4 addresses per ENI) from nodeadm's instance-info.jsonl.
EKS_ENIS: dict[str, tuple[int, int]] = {
    "p3dn.24xlarge": (15, 50),
    "g5.48xlarge": (7, 50),
    "p4d.24xlarge": (15, 50),
    "p4de.24xlarge": (15, 50),
    "p5.48xlarge": (2, 50),
    "p5e.48xlarge": (2, 50),
    "p5en.48xlarge": (4, 50),
    "p6-b200.48xlarge": (4, 50),
    "m6i.2xlarge": (4, 15),
    "m6i.4xlarge": (8, 30),
    "m6i.8xlarge": (8, 30),
    "m7i.2xlarge": (4, 15),
    "m7i.4xlarge": (8, 30),
    "m7i.8xlarge": (8, 30),
    "m7i.12xlarge": (8, 30),
    "m7i.16xlarge": (15, 50),
}
# (vCPUs, memory GiB) of machine types whose shape the project has checked, so a pool cannot claim more
# than its machines have. EC2: https://aws.amazon.com/ec2/instance-types/ (p5, p4, m7i pages);
# GCE: https://cloud.google.com/compute/docs/accelerator-optimized-machines (A3) and
# https://cloud.google.com/compute/docs/general-purpose-machines (N2 standard: 4 GB per vCPU).
MACHINE_SHAPES: dict[str, tuple[int, int]] = {
    **{f"n2-highmem-{n}": (n, 8 * n) for n in (4, 8, 16, 32, 48, 64, 80)},
    **{f"r5.{size}": (cpus, 8 * cpus) for size, cpus in (("xlarge", 4), ("4xlarge", 16), ("16xlarge", 64))},
    "p4d.24xlarge": (96, 1152),
    "p4de.24xlarge": (96, 1152),
    "p5.48xlarge": (192, 2048),
    "p5e.48xlarge": (192, 2048),
    "p5en.48xlarge": (192, 2048),
    "m7i.2xlarge": (8, 32),
    "m7i.4xlarge": (16, 64),
    "m7i.8xlarge": (32, 128),
    "m7i.12xlarge": (48, 192),
    "m7i.16xlarge": (64, 256),
    "a3-highgpu-8g": (208, 1872),
    "a3-megagpu-8g": (208, 1872),
    **{f"n2-standard-{n}": (n, 4 * n) for n in (8, 16, 32, 48, 64)},
}
# (upper bound of the tier, fraction reserved inside it); the last tier is open-ended.
_CPU_TIERS_MILLI = ((1000, 0.06), (2000, 0.01), (4000, 0.005), (None, 0.0025))
_GKE_MEMORY_TIERS_MI = (
    (4 * GIB_MI, 0.25),
    (8 * GIB_MI, 0.20),
    (16 * GIB_MI, 0.10),
    (128 * GIB_MI, 0.06),
    (None, 0.02),
)


class UnknownMachine(ValueError):
    """The reservation depends on a fact about the machine the project does not know; the message says
    which field states it."""


@dataclass(frozen=True)
class MemoryCapacity:
    """The kubelet's memory capacity of a node (the kernel's MemTotal), and where the number comes from."""

    nominal_mi: int
    capacity_mi: int
    source: str


def memory_capacity(memory_gib: int, machine: str | None = None, measured_gib: float | None = None) -> MemoryCapacity:
    """Kernel-visible memory of a node of nominal `memory_gib`: as measured on the pool's own nodes
    (`kernelMemoryGib`), as published for its machine type, or the nominal less `UNMEASURED_MARGIN`."""
    nominal = memory_gib * GIB_MI
    if measured_gib is not None:
        return MemoryCapacity(nominal, int(measured_gib * GIB_MI), "kernelMemoryGib, measured on the pool's nodes")
    if machine in MEASURED_CAPACITY:
        capacity, source = MEASURED_CAPACITY[machine]
        return MemoryCapacity(nominal, capacity * GIB_MI // GIB, f"measured on {machine}: {source}")
    return MemoryCapacity(
        nominal,
        int(nominal * (1 - UNMEASURED_MARGIN)),
        f"no published measurement{f' of {machine}' if machine else ''}: nominal less "
        f"{UNMEASURED_MARGIN:.1%} the kernel keeps",
    )


@dataclass(frozen=True)
class Allocatable:
    """A node's allocatable CPU and memory, and the terms it was computed from (for `check`'s message)."""

    capacity_cpu_milli: int
    capacity_memory_mi: int
    reserved_cpu_milli: int
    reserved_memory_mi: int
    eviction_memory_mi: int
    rule: str
    nominal_memory_mi: int = 0
    capacity_source: str = ""

    @property
    def cpu_milli(self) -> int:
        return self.capacity_cpu_milli - self.reserved_cpu_milli

    @property
    def memory_mi(self) -> int:
        return self.capacity_memory_mi - self.reserved_memory_mi - self.eviction_memory_mi

    def explain(self) -> str:
        """`1806.5 GiB − 44.2 GiB reserved (GKE tiers) − 100 MiB eviction = 1762.2 GiB; 208 − 0.59 = 207.41 CPUs`."""
        return (
            f"{_gib(self.capacity_memory_mi)} − {_gib(self.reserved_memory_mi)} reserved ({self.rule})"
            f" − {self.eviction_memory_mi} MiB eviction = {_gib(self.memory_mi)} memory; "
            f"{self.capacity_cpu_milli / 1000:g} − {self.reserved_cpu_milli / 1000:g} = {self.cpu_milli / 1000:g} CPUs"
        )


def _gib(mi: int | float) -> str:
    return f"{mi / GIB_MI:.1f} GiB"


def _tiered(total: int, tiers: tuple[tuple[int | None, float], ...]) -> int:
    reserved, start = 0.0, 0
    for end, fraction in tiers:
        top = total if end is None else min(total, end)
        if top > start:
            reserved += (top - start) * fraction
        if end is None or total <= end:
            break
        start = end
    return int(reserved)


def cpu_reserved_milli(cpus: int) -> int:
    """GKE's and EKS AL2023's kube-reserved CPU (the same tiers), in millicores, rounded down as nodeadm does."""
    return _tiered(cpus * 1000, _CPU_TIERS_MILLI)


def gke_memory_reserved_mi(memory_gib: int) -> int:
    """GKE's memory reservation for a machine of `memory_gib` (machines of 1 GiB or more)."""
    return _tiered(memory_gib * GIB_MI, _GKE_MEMORY_TIERS_MI)


def eks_max_pods(instance_type: str, stated: int | None) -> int:
    """nodeadm's default maxPods for the instance type, or the stated one."""
    if stated is not None:
        return stated
    if instance_type not in EKS_ENIS:
        raise UnknownMachine(
            f"maxPods of {instance_type} is not in the project's table; state it with `maxPods` "
            f"(known: {', '.join(sorted(EKS_ENIS))})"
        )
    enis, ips = EKS_ENIS[instance_type]
    return enis * (ips - 1) + 2


def eks_memory_reserved_mi(max_pods: int) -> int:
    """AL2023's kube-reserved memory: 11 MiB per pod the node may run, plus 255 MiB."""
    return 11 * max_pods + 255


def node_allocatable(
    env: Environment,
    cpus: int,
    memory_gib: int,
    machine: str | None = None,
    max_pods: int | None = None,
    measured_gib: float | None = None,
) -> Allocatable:
    """Allocatable of one node of `cpus` and nominal `memory_gib` on this environment's provider.

    The capacity is the kernel-visible memory (`memory_capacity`); the provider's reservation is computed
    from the nominal size, the larger of the two, so it never comes out smaller than the provider's.
    """
    assert env.kubernetes is not None
    provider = env.kubernetes.provider
    capacity = memory_capacity(memory_gib, machine, measured_gib)
    capacity_cpu = cpus * 1000
    terms = {"nominal_memory_mi": capacity.nominal_mi, "capacity_source": capacity.source}
    if provider == "gke":
        return Allocatable(
            capacity_cpu,
            capacity.capacity_mi,
            cpu_reserved_milli(cpus),
            gke_memory_reserved_mi(memory_gib),
            EVICTION_MEMORY_MI,
            "GKE tiers",
            **terms,
        )
    if provider == "eks":
        assert machine is not None
        pods = eks_max_pods(machine, max_pods)
        return Allocatable(
            capacity_cpu,
            capacity.capacity_mi,
            cpu_reserved_milli(cpus),
            eks_memory_reserved_mi(pods),
            EVICTION_MEMORY_MI,
            f"EKS AL2023, maxPods {pods}",
            **terms,
        )
    reserve = env.kubernetes.node_reserve
    return Allocatable(
        capacity_cpu,
        capacity.capacity_mi,
        round(reserve.cpus * 1000),
        int(reserve.memory_gib * GIB_MI),
        0,
        "kubernetes.nodeReserve",
        **terms,
    )


def pool_allocatable(env: Environment, pool_name: str) -> Allocatable:
    """Allocatable of one node of a GPU pool."""
    pool = env.pool(pool_name)
    measured = pool.kernel_memory_gib
    if pool.eks is not None:
        return node_allocatable(
            env, pool.cpus, pool.memory_gib, pool.eks.instance_type, pool.eks.max_pods, measured_gib=measured
        )
    machine = pool.gke.machine_type if pool.gke is not None else None
    return node_allocatable(env, pool.cpus, pool.memory_gib, machine, measured_gib=measured)


def head_allocatable(env: Environment) -> Allocatable | None:
    """Allocatable of one node of the head pool; None when the stack declares none."""
    assert env.kubernetes is not None
    head = env.kubernetes.head_pool
    if head is None:
        return None
    if head.eks is not None:
        return node_allocatable(env, head.cpus, head.memory_gib, head.eks.instance_type, head.eks.max_pods)
    return node_allocatable(env, head.cpus, head.memory_gib, head.gke.machine_type if head.gke else None)


def extra_reserve(env: Environment) -> tuple[int, int]:
    """(millicores, MiB) kept back on top of allocatable: `nodeReserve` on EKS and GKE (it is already inside
    an existing cluster's allocatable)."""
    assert env.kubernetes is not None
    if env.kubernetes.provider == "existing":
        return 0, 0
    reserve = env.kubernetes.node_reserve
    return round(reserve.cpus * 1000), int(reserve.memory_gib * GIB_MI)


def head_room(env: Environment) -> tuple[int, int] | None:
    """(millicores, MiB) a head-pool node has for pods after `nodeReserve`; None without a head pool."""
    allocatable = head_allocatable(env)
    if allocatable is None:
        return None
    extra_cpu, extra_memory = extra_reserve(env)
    return allocatable.cpu_milli - extra_cpu, allocatable.memory_mi - extra_memory
