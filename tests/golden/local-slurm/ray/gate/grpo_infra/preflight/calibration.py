"""Per-fabric calibration of the fabric gate: which all-reduce size to time, and what busbw a healthy gang reaches.

A gate that times one message size must time one on the bandwidth plateau of its fabric, or a healthy
fabric fails: an all-reduce's busbw rises with the message size until per-message costs stop mattering,
and how fast it rises depends on the transport. The public curves found (2 nodes x 8 H100, nccl-tests
all_reduce_perf; the files are in tests/preflight/data/real, each with its source):

* GPUDirect-TCPXO, a3-megagpu-8g: 297.86 GB/s at 1 GiB, 330.58 at 4 GiB, 338.82 at 8 GiB — 1 GiB is 88 %
  of the top, 4 GiB 97.6 % (lessizzmore/create-a3mega-ztan-fork, ztan-NCCL-test-result).
* GPUDirect-TCPX, a3-highgpu-8g: 86.99 GB/s at 1 GiB, 89.54 at 8 GiB — 1 GiB is 97 % of the top
  (GoogleCloudPlatform/ai-infra-cluster-provisioning, sample_workloads/nccltest/a3/README.md).
* InfiniBand HDR, 3 x 8 A100 with 4 x 200 Gb/s HCAs: 95.7-96.5 GB/s from 122 MiB on, the 24 GB/s per
  200G NIC an NCCL maintainer gives as the peak (NVIDIA/nccl-tests#119): verbs reach the plateau early.
* EFA (p5): no public size curve was found; aws-ofi-nccl is, like TCPXO, a multi-NIC transport with a
  large per-message cost, so the gate times the top of the published curves, 8 GiB.

Expected busbw is the node's network line rate times an efficiency, per GPU, so it scales with the GPUs
per node; nccl-tests' busbw tracks the bottleneck link whatever the rank count (doc/PERFORMANCE.md).
Two-node runs may exceed it (NCCL's tree algorithm, NVIDIA/nccl-tests#22), which only passes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .defaults import DEFAULT_SIZE_MIB


@dataclass(frozen=True)
class Calibration:
    """One fabric's gate: the size to time, and the busbw a healthy 8-GPU node reaches at that size."""

    fabric: str
    hardware: str
    line_rate_gbps_per_gpu: float
    """Network line rate per GPU, GB/s (10^9 bytes/s, as nccl-tests prints busbw)."""
    efficiency: float
    """Share of the line rate a healthy all-reduce reaches at `size_mib` (busbw / line rate)."""
    size_mib: int
    """All-reduce size the gate times: on the published plateau of this fabric."""
    sources: tuple[str, ...]

    def expected_busbw(self, gpus_per_node: int) -> float:
        """Expected all-reduce busbw, GB/s, for a node with this many GPUs."""
        return round(self.line_rate_gbps_per_gpu * gpus_per_node * self.efficiency, 1)


CALIBRATIONS: dict[str, Calibration] = {
    calibration.fabric: calibration
    for calibration in (
        Calibration(
            fabric="infiniband",
            hardware="NDR: one 400 Gb/s ConnectX-7 per GPU (DGX/HGX H100), 3200 Gb/s per 8-GPU node",
            line_rate_gbps_per_gpu=50.0,
            efficiency=0.90,
            size_mib=1024,
            sources=(
                "NVIDIA/nccl-tests#290: 46-48 GB/s per NDR 400 Gb/s NIC",
                "NVIDIA/nccl-tests#267: CX-7 at NDR up to 48-49 GB/s per NIC",
                "NVIDIA/nccl-tests#119: 24 GB/s per 200G NIC, reached from ~128 MB on HDR",
            ),
        ),
        Calibration(
            fabric="roce",
            hardware="400 GbE RoCEv2, one ConnectX-7 per GPU, 3200 Gb/s per 8-GPU node",
            line_rate_gbps_per_gpu=50.0,
            efficiency=0.85,
            size_mib=1024,
            sources=(
                "the verbs transport of `infiniband` (same HCAs, same plateau)",
                "NVIDIA/aicr#1413: RoCE all_reduce peak ~387 GB/s (8 RoCE devices, 2 nodes)",
            ),
        ),
        Calibration(
            fabric="efa",
            hardware="AWS p5.48xlarge: 32 EFA interfaces, 3200 Gbps EFAv2 per 8-GPU instance",
            line_rate_gbps_per_gpu=50.0,
            efficiency=0.75,
            size_mib=8192,
            sources=(
                "aws-samples/aws-hpc-tutorials content/04-Verify-Cluster/_index.md: p5.48xlarge 3200 Gbps EFAv2",
                "no public p5 size curve found: 8 GiB is the top of the TCPXO/TCPX curves",
            ),
        ),
        Calibration(
            fabric="tcpx",
            hardware="GCP a3-highgpu-8g: 4 x 200 Gbps GPU NICs (GPUDirect-TCPX), 800 Gbps per 8-GPU node",
            line_rate_gbps_per_gpu=12.5,
            efficiency=0.85,
            size_mib=1024,
            sources=(
                "GoogleCloudPlatform/ai-infra-cluster-provisioning sample_workloads/nccltest/a3/README.md: "
                "86.99 GB/s at 1 GiB, 89.54 at 8 GiB (2 nodes)",
                "cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx: "
                "up to 4 secondary NICs of 200 Gbps",
            ),
        ),
        Calibration(
            fabric="tcpxo",
            hardware="GCP a3-megagpu-8g: 8 x 200 Gbps GPU NICs (GPUDirect-TCPXO), 1600 Gbps per 8-GPU node",
            line_rate_gbps_per_gpu=25.0,
            efficiency=0.90,
            size_mib=4096,
            sources=(
                "lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result: 297.86 GB/s at 1 GiB, "
                "330.58 at 4 GiB, 338.82 at 8 GiB (2 nodes)",
                "docs.nvidia.com/aicr/integrator-guide/gke-tcpxo-networking: ~340 GB/s with TCPXO",
            ),
        ),
    )
}

# The size the gate times where no fabric is calibrated (fabric `none`: nothing to reach a plateau of).
UNCALIBRATED_SIZE_MIB = DEFAULT_SIZE_MIB


def calibration(fabric: str) -> Calibration | None:
    """The fabric's calibration; None for `none`, which has no line rate to expect."""
    return CALIBRATIONS.get(fabric)


def gate_size_mib(fabric: str) -> int:
    """The all-reduce size the gate times on this fabric when the stack names none."""
    found = CALIBRATIONS.get(fabric)
    return found.size_mib if found else UNCALIBRATED_SIZE_MIB
