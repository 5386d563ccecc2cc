"""Per-fabric calibration of the fabric gate: which all-reduce size to time, and what busbw a healthy gang reaches.

Every expected bus bandwidth here is a published nccl-tests all_reduce_perf measurement of a healthy
fabric (out-of-place busbw, 8 GPUs per node), kept with its source, node count and message size; the gate
fails a run under ``fraction x`` that figure (``DEFAULT_FRACTION`` in :mod:`.defaults`). Where no public
measurement was found the figure is an estimate, marked ``measured=False``, chosen low so that it cannot
fail a healthy fabric.

Two node counts behave differently, so each fabric has a figure for each:

* **2 nodes**: NCCL runs all-reduce as a tree (NVLSTree on H100) and nccl-tests' busbw goes above the
  NICs' rate "provided the intra-node bandwidth can sustain that higher speed" (NCCL maintainer in
  NVIDIA/nccl-tests#196; NVIDIA/nccl-tests#22). A 2-node gate held to a NIC-bound figure would pass a
  fabric running at 80 % of what two healthy nodes reach.
* **3 nodes and more**: rings for large messages, busbw tracks the NICs' bandwidth (NVIDIA/nccl-tests#160)
  and declines slowly with the node count; the gate takes the measurement at the largest measured node
  count not above the job's (the smallest measured one for fewer nodes: a lower figure, never a higher).

Where two public healthy runs disagree, the lower one is the expectation (the gate must not fail a run
the public calls healthy) and the other is kept as a further source. The size the gate times sits on the
published plateau of its fabric (tests/preflight/test_calibration.py checks the curves kept there).
"""

from __future__ import annotations

from dataclasses import dataclass

from .defaults import DEFAULT_SIZE_MIB

# Node count from which NCCL's all-reduce is ring-bound on the NICs (see the module docstring).
RING_BOUND_FROM_NODES = 3
# GPUs per node of every measurement below (HGX/DGX H100/H200, p5, A3): expectations scale from it.
MEASURED_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Measurement:
    """One published all-reduce busbw (GB/s, out of place) of a healthy fabric, or an estimate in its place."""

    busbw_gbps: float
    nodes: int
    size_mib: int | None
    """The message size the figure was read at; None when the source states only a sweep's peak."""
    source: str
    """URL, or repository + path + line (and commit), and what the figure is in that source."""
    measured: bool = True
    """False: no public measurement was found and this is a conservative estimate (``source`` says why)."""


@dataclass(frozen=True)
class Calibration:
    """One fabric's gate: the size to time and the busbw a healthy 8-GPU node reaches there, per node count."""

    fabric: str
    hardware: str
    line_rate_gbps_per_gpu: float
    """Network line rate per GPU, GB/s: no ring-bound (3+ nodes) expectation may exceed it."""
    size_mib: int
    """All-reduce size the gate times: on the published plateau of this fabric."""
    two_nodes: Measurement
    multi_node: tuple[Measurement, ...]
    """Measurements at 3 nodes or more, by node count."""
    notes: tuple[str, ...] = ()

    def measurement(self, nodes: int) -> Measurement:
        """The measurement a gang of this many nodes (2 or more) is held to."""
        if nodes < RING_BOUND_FROM_NODES:
            return self.two_nodes
        below = [m for m in self.multi_node if m.nodes <= nodes]
        if below:
            return max(below, key=lambda m: m.nodes)
        return min(self.multi_node, key=lambda m: m.nodes)

    def expected_busbw(self, gpus_per_node: int, nodes: int) -> float:
        """Expected all-reduce busbw, GB/s, for `nodes` nodes of `gpus_per_node` GPUs (each GPU with its share
        of the node's NICs, as on every measured machine)."""
        found = self.measurement(nodes)
        return round(found.busbw_gbps * gpus_per_node / MEASURED_GPUS_PER_NODE, 2)


# Every source is a URL (at a commit where it is a file) followed by what it measured; test_calibration.py
# fails an expectation without one.
_EFA_CSV = (
    "https://github.com/crazyguitar/aws-gpu-communication-benchmark/blob/"
    "fd167f97ab85009ff342f91e7117a80fd3741f39/data/nccl_all_reduce.csv"
)
_IB_309 = "https://github.com/NVIDIA/nccl-tests/issues/309"
_ROCE_2409 = "https://github.com/NVIDIA/nccl/issues/2409"
_TCPX_SKYPILOT = (
    "https://github.com/skypilot-org/skypilot/blob/9a3aa4d924105d5426c4fc56f0d8ade69e266169/"
    "examples/gcp_gpu_direct_tcpx/README.md"
)
_TCPX_GOOGLE = (
    "https://github.com/GoogleCloudPlatform/ai-infra-cluster-provisioning/blob/"
    "d5cdbd194ccfeb9770990f2e36fde38a4a862c00/sample_workloads/nccltest/a3/README.md"
)
_TCPXO_2X8 = (
    "https://github.com/lessizzmore/create-a3mega-ztan-fork/blob/02dd8f455c43ced1cf442ef29334bda97149264b/"
    "ztan-NCCL-test-result"
)
_TCPXO_NICS = "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx"

CALIBRATIONS: dict[str, Calibration] = {
    calibration.fabric: calibration
    for calibration in (
        Calibration(
            fabric="infiniband",
            hardware="NDR: one 400 Gb/s ConnectX-7 per GPU (DGX/HGX H100), 3200 Gb/s per 8-GPU node",
            line_rate_gbps_per_gpu=50.0,
            size_mib=1024,
            two_nodes=Measurement(
                470.0,
                nodes=2,
                size_mib=None,
                source=f"{_IB_309}: Dell XE9680, 8 x H100 + 8 x CX-7 NDR per node, NCCL 2.26.2, -b 8 -e 16g: "
                '"each 2 nodes with 16 pairs can still get 470 GB/s" (peak of the sweep; size not stated)',
            ),
            multi_node=(
                Measurement(
                    365.84,
                    nodes=4,
                    size_mib=None,
                    source=f'{_IB_309}: the same machines, "4 nodes on 32 GPU-NIC pairs ... max busbw can get '
                    "365.84 GB/s\" (peak of the sweep); the maintainer's 46-48 GB/s per NDR NIC "
                    "(NVIDIA/nccl-tests#290) gives 368-384 for 8",
                ),
            ),
            notes=(
                "1 GiB: verbs reach their plateau early (96 GB/s from 122 MiB on with 4 HDR HCAs, "
                "NVIDIA/nccl-tests#119); no public NDR size curve was found",
            ),
        ),
        Calibration(
            fabric="roce",
            hardware="400 GbE RoCEv2, one ConnectX-7 per GPU, 3200 Gb/s per 8-GPU node",
            line_rate_gbps_per_gpu=50.0,
            size_mib=1024,
            two_nodes=Measurement(
                365.84,
                nodes=2,
                size_mib=None,
                measured=False,
                source="estimate: no public all-reduce of a healthy 2 x 8 H100 400 GbE RoCE pair was found "
                f"({_ROCE_2409} is a broken one: 216.5 GB/s at 1 GiB, its author expecting ~470); the "
                f"ring-bound NDR figure of the same HCAs ({_IB_309}, 4 nodes) stands in, below a tree's 2-node peak",
            ),
            multi_node=(
                Measurement(
                    365.84,
                    nodes=4,
                    size_mib=None,
                    measured=False,
                    source=f"estimate: no public multi-node RoCE figure with text was found; NDR verbs on the same "
                    f"HCAs, {_IB_309} (4 nodes)",
                ),
            ),
        ),
        Calibration(
            fabric="efa",
            hardware="AWS p5.48xlarge: 32 EFA interfaces, 3200 Gbps EFAv2 per 8-GPU instance",
            line_rate_gbps_per_gpu=50.0,
            size_mib=8192,
            two_nodes=Measurement(
                477.71,
                nodes=2,
                size_mib=8192,
                source=f"{_EFA_CSV} line 10: 2 x p5.48xlarge (16 GPUs), out-of-place busbw 477.71 GB/s at "
                "8192 MB (435.14 at 1024 MB, line 7)",
            ),
            multi_node=(
                Measurement(
                    356.99,
                    nodes=4,
                    size_mib=8192,
                    source=f"{_EFA_CSV} line 19: 4 x p5.48xlarge, busbw 356.99 GB/s at 8192 MB",
                ),
                Measurement(
                    355.36,
                    nodes=8,
                    size_mib=8192,
                    source=f"{_EFA_CSV} line 28: 8 x p5.48xlarge, busbw 355.36 GB/s at 8192 MB",
                ),
                Measurement(
                    356.27,
                    nodes=16,
                    size_mib=8192,
                    source=f"{_EFA_CSV} line 37: 16 x p5.48xlarge, busbw 356.27 GB/s at 8192 MB",
                ),
                Measurement(
                    321.10,
                    nodes=32,
                    size_mib=8192,
                    source=f"{_EFA_CSV} line 46: 32 x p5.48xlarge, busbw 321.10 GB/s at 8192 MB",
                ),
            ),
            notes=(
                "8 GiB: at 4 to 16 nodes 1 GiB reaches only 269-280 GB/s of the 355-357 at 8 GiB "
                f"({_EFA_CSV} lines 16, 25, 34); the runs used aws-ofi-nccl's tuner (NCCL_TUNER_PLUGIN)",
                "p5.48xlarge line rate: https://github.com/aws-samples/aws-hpc-tutorials "
                "content/04-Verify-Cluster/_index.md",
            ),
        ),
        Calibration(
            fabric="tcpx",
            hardware="GCP a3-highgpu-8g: 4 x 200 Gbps GPU NICs (GPUDirect-TCPX), 800 Gbps per 8-GPU node",
            line_rate_gbps_per_gpu=12.5,
            size_mib=1024,
            two_nodes=Measurement(
                66.2,
                nodes=2,
                size_mib=1024,
                source=f"{_TCPX_SKYPILOT} 'Performance Benchmark Results': 2 x a3-highgpu-8g, all_reduce_perf "
                "with NCCL_ALGO=Ring (nccl_tcpx_gcpvm_h100.yaml), busbw 66.2 GB/s at 1 GB, 20.09 without TCPX; "
                f"{_TCPX_GOOGLE} shows 86.99 at 1 GiB (the lower one is expected)",
            ),
            multi_node=(
                Measurement(
                    66.2,
                    nodes=3,
                    size_mib=1024,
                    measured=False,
                    source="estimate: no public 3+ node TCPX all-reduce was found; the 2-node ring run of "
                    f"{_TCPX_SKYPILOT} (NCCL_ALGO=Ring, so already NIC-bound: 66.2 GB/s at 1 GB) stands in",
                ),
            ),
        ),
        Calibration(
            fabric="tcpxo",
            hardware="GCP a3-megagpu-8g: 8 x 200 Gbps GPU NICs (GPUDirect-TCPXO), 1600 Gbps per 8-GPU node",
            line_rate_gbps_per_gpu=25.0,
            size_mib=4096,
            two_nodes=Measurement(
                330.58,
                nodes=2,
                size_mib=4096,
                source=f"{_TCPXO_2X8}: 2 x a3-megagpu-8g, all_reduce_perf busbw 330.58 GB/s at 4 GiB (297.86 at "
                "1 GiB, 338.82 at 8 GiB); tests/preflight/data/real/tcpxo_a3mega_2x8_all_reduce.txt",
            ),
            multi_node=(
                Measurement(
                    180.0,
                    nodes=3,
                    size_mib=4096,
                    measured=False,
                    source="estimate: no public 3+ node TCPXO all-reduce was found; 90 % of the 1600 Gbps "
                    f"(200 GB/s) of A3 Mega's 8 x 200 Gbps GPU NICs ({_TCPXO_NICS})",
                ),
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
