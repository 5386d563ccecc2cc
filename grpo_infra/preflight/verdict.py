"""Pass or fail a fabric before GPU time is spent: right transport on every rank, enough bus bandwidth.

Expected all-reduce busbw defaults (GB/s, as nccl-tests prints) are derived from line rate:

    expected = gpus_per_node x per-GPU network line rate x efficiency

* ``infiniband``: NDR, one 400 Gb/s ConnectX-7 HCA per GPU (NVIDIA DGX H100 / HGX H100 reference:
  8 x 400 Gb/s compute ports per 8-GPU node) = 50 GB/s per GPU, 400 GB/s per node. Efficiency 0.90
  -> 360 GB/s for 8 GPUs. Published 2-node 8xH100 NDR all_reduce_perf runs reach ~350-370 GB/s with
  ring/tree and up to ~480 GB/s with NVLink SHARP; nccl-tests doc/PERFORMANCE.md explains why busbw
  tracks the bottleneck link (here the NICs) independently of rank count.
* ``efa``: AWS p5.48xlarge, 3200 Gbps of EFA per 8-GPU node (AWS EC2 P5 instance specification)
  = 400 GB/s per node. Efficiency 0.75 -> 300 GB/s; published p5 runs range from ~100 GB/s (early
  aws-ofi-nccl) to ~350-400 GB/s (recent plugin and NCCL), so pin your own baseline with
  ``expected_busbw_gbps`` once measured.
* ``roce``: 400 GbE RoCEv2, one NIC per GPU (ConnectX-7 / BlueField-3 Ethernet, Spectrum-X-style
  rail design) = 400 GB/s per node. Efficiency 0.85 -> 340 GB/s, below InfiniBand for congestion
  control and ECN/PFC tuning on lossless Ethernet.
* ``none``: no RDMA fabric, no bandwidth default (TCP varies too much to state one).

A single-node run never touches the fabric (NVLink carries it), so no default applies there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .defaults import DEFAULT_FRACTION, FABRIC_KINDS
from .nccl_log import RDMA_TRANSPORTS
from .report import FileReport

# Per-GPU network line rate in GB/s (400 Gb/s / 8) and the share of it all-reduce busbw reaches.
LINE_RATE_GBPS_PER_GPU: dict[str, float] = {"infiniband": 50.0, "roce": 50.0, "efa": 50.0}
EFFICIENCY: dict[str, float] = {"infiniband": 0.90, "roce": 0.85, "efa": 0.75}


@dataclass
class Verdict:
    """The gate's answer: passed, and every reason it failed (empty when it passed)."""

    passed: bool
    reasons: list[str]
    notes: list[str] = field(default_factory=list)
    fabric: str = "none"
    expected_busbw_gbps: float | None = None
    threshold_gbps: float | None = None
    peak_busbw_gbps: float | None = None
    transport: str | None = None

    @property
    def threshold_text(self) -> str:
        """The bar in words for the one-line verdicts: `threshold=X GB/s (expected Y GB/s)`, or `no threshold`
        when the pool has no fabric bandwidth to expect (a dash there read like a missing number)."""
        if self.threshold_gbps is None:
            return "no threshold"
        expected = "" if self.expected_busbw_gbps is None else f" (expected {self.expected_busbw_gbps:.2f} GB/s)"
        return f"threshold={self.threshold_gbps:.2f} GB/s{expected}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "fabric": self.fabric,
            "transport": self.transport,
            "peak_busbw_gbps": self.peak_busbw_gbps,
            "expected_busbw_gbps": self.expected_busbw_gbps,
            "threshold_gbps": self.threshold_gbps,
            "reasons": self.reasons,
            "notes": self.notes,
        }


def default_expected_busbw(fabric: str, gpus_per_node: int, nodes: int) -> float | None:
    """Documented default all-reduce busbw (GB/s) for a fabric; None where none can be stated."""
    _check_fabric(fabric)
    if nodes <= 1 or fabric not in LINE_RATE_GBPS_PER_GPU:
        return None
    return round(LINE_RATE_GBPS_PER_GPU[fabric] * gpus_per_node * EFFICIENCY[fabric], 1)


def _check_fabric(fabric: str) -> None:
    if fabric not in FABRIC_KINDS:
        raise ValueError(f"fabric kind {fabric!r} is not one of {', '.join(FABRIC_KINDS)}")


def judge(
    *,
    fabric: str,
    gpus_per_node: int,
    nodes: int,
    peak_busbw_gbps: float | None,
    rank_transports: Mapping[str, str | None],
    problems: Sequence[str] = (),
    ranks_seen: int | None = None,
    hosts_seen: int | None = None,
    expected_busbw_gbps: float | None = None,
    fraction: float = DEFAULT_FRACTION,
) -> Verdict:
    """Judge plain measurements against the pool's fabric.

    ``rank_transports`` maps a rank label (e.g. ``"rank 3 (node-b pid 812)"``) to its transport
    (``infiniband``, ``roce``, ``efa``, ``ofi``, ``socket``, ``mixed`` or None when unknown).
    Fails when any rank uses sockets or another transport than the fabric, when the run did not
    cover every GPU, when the parsed output has problems, or when peak busbw < fraction x expected.
    """
    _check_fabric(fabric)
    if gpus_per_node < 1 or nodes < 1:
        raise ValueError("gpus_per_node and nodes must be at least 1")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    reasons = list(problems)
    notes: list[str] = []

    known = {label: kind for label, kind in rank_transports.items() if kind}
    kinds = set(known.values())
    transport = None if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"
    if fabric != "none" and nodes > 1:
        on_socket = [label for label, kind in known.items() if kind in ("socket", "mixed")]
        if on_socket:
            shown = ", ".join(on_socket[:6]) + (f" and {len(on_socket) - 6} more" if len(on_socket) > 6 else "")
            reasons.append(f"{len(on_socket)} rank(s) fell back to sockets instead of {fabric}: {shown}")
        wrong = sorted({kind for kind in known.values() if kind in RDMA_TRANSPORTS and kind != fabric})
        if wrong:
            reasons.append(f"NCCL used {', '.join(wrong)} but the pool's fabric is {fabric}")
        if not known:
            notes.append("no NCCL_DEBUG=INFO lines with a transport: transport not checked")
    elif fabric == "none" and any(kind in RDMA_TRANSPORTS for kind in known.values()):
        notes.append("the pool declares no RDMA fabric but NCCL found one")

    total = gpus_per_node * nodes
    if ranks_seen is not None and ranks_seen != total:
        reasons.append(f"the test ran on {ranks_seen} ranks but the pool has {nodes} x {gpus_per_node} = {total} GPUs")
    if hosts_seen is not None and hosts_seen != nodes:
        reasons.append(f"the test ran on {hosts_seen} host(s) but the pool has {nodes} node(s)")

    expected = (
        expected_busbw_gbps if expected_busbw_gbps is not None else default_expected_busbw(fabric, gpus_per_node, nodes)
    )
    threshold = round(expected * fraction, 2) if expected is not None else None
    if peak_busbw_gbps is None:
        if known:
            notes.append("no nccl-tests table: bus bandwidth not checked")
        else:
            reasons.append("nothing to judge: neither bandwidth figures nor NCCL transport lines were found")
    elif threshold is None:
        notes.append(
            "no expected bus bandwidth for this pool (single node or no RDMA fabric): pass --expected-busbw"
            if nodes <= 1 or fabric == "none"
            else "no expected bus bandwidth"
        )
    elif peak_busbw_gbps < threshold:
        reasons.append(
            f"peak busbw {peak_busbw_gbps:.2f} GB/s is under {fraction:g} x {expected:g} GB/s = "
            f"{threshold:g} GB/s expected of {fabric}"
        )
    return Verdict(
        passed=not reasons,
        reasons=reasons,
        notes=notes,
        fabric=fabric,
        expected_busbw_gbps=expected,
        threshold_gbps=threshold,
        peak_busbw_gbps=peak_busbw_gbps,
        transport=transport,
    )


def fabric_verdict(
    reports: Sequence[FileReport],
    fabric: str,
    gpus_per_node: int,
    nodes: int,
    expected_busbw_gbps: float | None = None,
    fraction: float = DEFAULT_FRACTION,
) -> Verdict:
    """Judge parsed files (tables and/or logs) of one preflight run against the pool's fabric.

    The peak busbw is the largest out-of-place busbw of the all-reduce runs (the defaults are
    all-reduce figures), or of any collective when no all-reduce was run.
    """
    peaks_ar = [r.tests.peak_for("all_reduce") for r in reports if r.tests is not None]
    peaks_any = [r.tests.peak_busbw_gbps for r in reports if r.tests is not None]
    values = [p for p in peaks_ar if p is not None] or [p for p in peaks_any if p is not None]
    peak = max(values) if values else None

    rank_transports: dict[str, str | None] = {}
    for report in reports:
        if report.log is not None:
            for proc in report.log.processes:
                rank_transports[f"{proc.label} in {report.file}"] = proc.transport
    # Socket fallbacks found in logs are judged from rank_transports below; list them once.
    problems = [f"{r.file}: {p}" for r in reports for p in r.problems if "fell back to sockets" not in p]
    ranks = [r.ranks for r in reports if r.ranks]
    hosts = {h for r in reports for h in r.hosts}
    verdict = judge(
        fabric=fabric,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        peak_busbw_gbps=peak,
        rank_transports=rank_transports,
        problems=problems,
        ranks_seen=max(ranks) if ranks else None,
        hosts_seen=len(hosts) if hosts else None,
        expected_busbw_gbps=expected_busbw_gbps,
        fraction=fraction,
    )
    if values and all(p is None for p in peaks_ar):
        verdict.notes.append("no all_reduce run: peak busbw taken from another collective")
    return verdict
