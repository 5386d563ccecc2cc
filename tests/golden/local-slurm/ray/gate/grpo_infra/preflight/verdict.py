"""Pass or fail a fabric before GPU time is spent: right transport on every rank, enough bus bandwidth.

Expected all-reduce busbw and the size to time come from :mod:`.calibration` (per fabric, with the
published measurements behind each number). A single-node run never touches the fabric (NVLink carries
it), so no default applies there.

A fabric never passes on bandwidth alone: every rank's NCCL log must name the pool's transport. No
transport line, a transport this module cannot tell apart (NCCL's verbs transport without its device line:
InfiniBand or RoCE; libfabric without its provider line: EFA or not), or a network it does not know, each
fails the gate with one line saying which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .calibration import CALIBRATIONS
from .defaults import DEFAULT_FRACTION, FABRIC_KINDS
from .nccl_log import FABRIC_TRANSPORTS, WARN_ONLY
from .report import FileReport

# What the gate can judge: the fabrics a pool may declare (`FABRIC_KINDS`, the spec's `fabric.kind`)
# plus Google's GPUDirect-TCPX/-TCPXO fabrics, which `nccl verdict --fabric` accepts.
GATE_FABRICS: tuple[str, ...] = (*(kind for kind in FABRIC_KINDS if kind != "none"), "tcpx", "tcpxo", "none")

# Why a transport other than the pool's fails, in the gate's one line.
_MISMATCH: dict[str, str] = {
    "ib": "NCCL's IB verbs transport without its device line (`NET/IB : Using [0]mlx5_0:1/IB` or `/RoCE`): "
    "InfiniBand and RoCE cannot be told apart",
    "ofi": "libfabric (aws-ofi-nccl) without an EFA provider (`NET/OFI Selected Provider is efa` missing or "
    "another provider)",
    "unknown": "a network the gate does not know",
}


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
    """Calibrated all-reduce busbw (GB/s) for a fabric (:mod:`.calibration`); None where none can be stated."""
    _check_fabric(fabric)
    if nodes <= 1 or fabric not in CALIBRATIONS:
        return None
    return CALIBRATIONS[fabric].expected_busbw(gpus_per_node, nodes)


def _check_fabric(fabric: str) -> None:
    if fabric not in GATE_FABRICS:
        raise ValueError(f"fabric kind {fabric!r} is not one of {', '.join(GATE_FABRICS)}")


def transport_reasons(fabric: str, rank_transports: Mapping[str, str | None], *, warn_only: bool = False) -> list[str]:
    """Why the ranks' transports fail a multi-node gate on `fabric`, one line each; empty when every rank
    shows the fabric's own transport.

    ``rank_transports`` maps a rank label to what its NCCL log showed (None: no transport line).
    ``warn_only``: the logs hold NCCL WARN lines and nothing else (NCCL_DEBUG=WARN), said in the one line.
    """
    known = {label: kind for label, kind in rank_transports.items() if kind}
    silent = [label for label, kind in rank_transports.items() if not kind]
    if not known:
        if warn_only:
            return [WARN_ONLY]
        return [
            f"transport unknown: no NCCL INFO line names the network, so {fabric} is not confirmed "
            "(run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; a fabric never passes on bandwidth alone)"
        ]
    reasons: list[str] = []
    on_socket = [label for label, kind in known.items() if kind in ("socket", "mixed")]
    if on_socket:
        reasons.append(f"{len(on_socket)} rank(s) fell back to sockets instead of {fabric}: {_shown(on_socket)}")
    others: dict[str, list[str]] = {}
    for label, kind in known.items():
        if kind not in ("socket", "mixed", fabric):
            others.setdefault(kind, []).append(label)
    for kind, labels in sorted(others.items()):
        why = _MISMATCH.get(kind, f"NCCL used {kind}")
        reasons.append(f"{why}, but the pool's fabric is {fabric}: {_shown(labels)}")
    if silent:
        reasons.append(f"transport unknown for {len(silent)} rank(s) whose NCCL log names no network: {_shown(silent)}")
    return reasons


def _shown(labels: Sequence[str]) -> str:
    return ", ".join(labels[:6]) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")


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
    warn_only: bool = False,
) -> Verdict:
    """Judge plain measurements against the pool's fabric.

    ``rank_transports`` maps a rank label (e.g. ``"rank 3 (node-b pid 812)"``) to its transport
    (see :mod:`.nccl_log`; None when its log names none). Fails when any rank's transport is not the
    fabric's own or is unknown (:func:`transport_reasons`), when the run did not cover every GPU, when
    the parsed output has problems, or when peak busbw < fraction x expected.
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
        reasons += transport_reasons(fabric, rank_transports, warn_only=warn_only)
    elif fabric == "none" and any(kind in FABRIC_TRANSPORTS for kind in known.values()):
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
        elif fabric == "none" or nodes <= 1:
            reasons.append(
                WARN_ONLY
                if warn_only
                else "nothing to judge: neither bandwidth figures nor NCCL transport lines were found"
            )
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
    logs = [r.log for r in reports if r.log is not None]
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
        warn_only=bool(logs) and all(log.warn_only for log in logs),
    )
    if values and all(p is None for p in peaks_ar):
        verdict.notes.append("no all_reduce run: peak busbw taken from another collective")
    return verdict
