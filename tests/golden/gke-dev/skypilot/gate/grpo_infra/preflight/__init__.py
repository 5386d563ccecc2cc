"""The NCCL fabric gate: parse nccl-tests output and NCCL logs, then judge them against the pool's fabric."""

from __future__ import annotations

from .nccl_log import NcclLogReport, ProcessTransport, parse_nccl_log
from .nccl_tests import COLLECTIVES, NcclTestsReport, NcclTestsRun, Row, busbw_factor, parse_nccl_tests
from .report import FileReport, UnreadableInput, parse_text, read_report
from .verdict import (
    DEFAULT_FRACTION,
    FABRIC_KINDS,
    Verdict,
    default_expected_busbw,
    fabric_verdict,
    judge,
)

__all__ = [
    "COLLECTIVES",
    "DEFAULT_FRACTION",
    "FABRIC_KINDS",
    "FileReport",
    "NcclLogReport",
    "NcclTestsReport",
    "NcclTestsRun",
    "ProcessTransport",
    "Row",
    "UnreadableInput",
    "Verdict",
    "busbw_factor",
    "default_expected_busbw",
    "fabric_verdict",
    "judge",
    "parse_nccl_log",
    "parse_nccl_tests",
    "parse_text",
    "read_report",
]
