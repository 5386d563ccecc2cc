"""The gate reads what real fabrics print: every sample of tests/preflight/data/real, with the labels read
from its text by hand (data/real/index.yaml, one public source each), parses to those labels, and the
verdict passes a sample's transport only for that transport's own fabric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.preflight import parse_text
from grpo_infra.preflight.report import FileReport
from grpo_infra.preflight.verdict import GATE_FABRICS, fabric_verdict, transport_reasons

REAL = Path(__file__).parent / "data" / "real"
INDEX: list[dict[str, Any]] = yaml.safe_load((REAL / "index.yaml").read_text())["samples"]
FABRICS = [fabric for fabric in GATE_FABRICS if fabric != "none"]
# The fabric a sample's transport belongs to (`ib` and `ofi` belong to none: they are ambiguous).
OWN_FABRIC = {"infiniband": "infiniband", "roce": "roce", "efa": "efa", "tcpx": "tcpx", "tcpxo": "tcpxo"}


def _report(sample: dict[str, Any]) -> FileReport:
    return parse_text((REAL / sample["file"]).read_text(), sample["file"])


def _rank_transports(report: FileReport) -> dict[str, str | None]:
    return {proc.label: proc.transport for proc in (report.log.processes if report.log else [])}


def test_the_index_names_every_sample_once_with_a_public_source() -> None:
    files = sorted(p.name for p in REAL.iterdir() if p.name != "index.yaml")
    named = [s["file"] for s in INDEX]
    assert sorted(named) == files and len(set(named)) == len(named)
    assert len(INDEX) >= 25
    for sample in INDEX:
        assert sample["source"].startswith("https://github.com/"), sample["file"]
        assert sample["why"], sample["file"]


def test_the_samples_cover_every_transport_the_gate_recognises() -> None:
    seen = {s["transport"] for s in INDEX}
    assert {"infiniband", "roce", "efa", "ofi", "socket", None} <= seen


@pytest.mark.parametrize("sample", INDEX, ids=lambda s: s["file"])
def test_sample_parses_to_its_labels(sample: dict[str, Any]) -> None:
    report = _report(sample)
    assert report.transport == sample["transport"]
    tests = report.tests
    if sample["busbw"] is None:
        assert tests is None or tests.peak_busbw_gbps is None
    else:
        assert tests is not None and tests.peak_busbw_gbps == pytest.approx(sample["busbw"])
    if "busbw_1gib" in sample:
        assert tests is not None
        at_1gib = [r.out_of_place.busbw_gbps for r in tests.rows if r.size_bytes == 1 << 30 and r.out_of_place]
        assert at_1gib == [pytest.approx(sample["busbw_1gib"])]
    if "avg_busbw" in sample:
        assert tests is not None and tests.avg_busbw_gbps == pytest.approx(sample["avg_busbw"])
    if sample["ranks"] is not None:
        assert report.ranks == sample["ranks"]
    if sample["nodes"] is not None:
        assert len(report.hosts) == sample["nodes"], report.hosts
    if sample["collective"] is not None:
        assert tests is not None
        named = tests.collective
        if named is None:  # all-gather and all-to-all print the same columns
            assert sample["collective"] in ("all_gather", "alltoall")
            assert tests.runs[0].collective_source == "columns:all_gather|alltoall"
        else:
            assert named == sample["collective"]
    assert bool(report.problems) == sample["problem"], report.problems


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("sample", INDEX, ids=lambda s: s["file"])
def test_a_samples_transport_passes_only_its_own_fabric(sample: dict[str, Any], fabric: str) -> None:
    report = _report(sample)
    reasons = transport_reasons(fabric, _rank_transports(report))
    own = OWN_FABRIC.get(sample["transport"] or "")
    silent = [p.label for p in (report.log.processes if report.log else []) if p.transport is None]
    if own == fabric and not silent:
        assert reasons == []
    else:
        assert reasons, f"{sample['file']} ({sample['transport']}) must not pass as {fabric}"
        assert all("\n" not in reason for reason in reasons)


@pytest.mark.parametrize("sample", [s for s in INDEX if s["transport"] is None], ids=lambda s: s["file"])
def test_unknown_transport_fails_loudly_with_one_line(sample: dict[str, Any]) -> None:
    for fabric in FABRICS:
        verdict = fabric_verdict([_report(sample)], fabric, gpus_per_node=8, nodes=2, expected_busbw_gbps=0.001)
        assert not verdict.passed
        unknown = [r for r in verdict.reasons if "transport unknown" in r]
        assert len(unknown) == 1 and "\n" not in unknown[0], verdict.reasons
