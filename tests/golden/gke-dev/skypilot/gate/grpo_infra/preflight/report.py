"""One report per input file, combining its nccl-tests table and its NCCL INFO lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nccl_log import NcclLogReport, parse_nccl_log
from .nccl_tests import NcclTestsReport, parse_nccl_tests

# One run's nccl-tests output with NCCL_DEBUG=INFO on a few hundred GPUs is tens of MiB.
MAX_REPORT_BYTES = 256 << 20
# Where a binary file (a NUL byte) is looked for before the rest is read.
_HEAD_BYTES = 4096


class UnreadableInput(Exception):
    """A file that is missing, not text, or holds nothing from nccl-tests or NCCL."""


@dataclass
class FileReport:
    """What one file says about the fabric: bandwidth (nccl-tests) and transport (NCCL log)."""

    file: str
    tests: NcclTestsReport | None
    log: NcclLogReport | None

    @property
    def kind(self) -> str:
        return "nccl-tests" if self.tests is not None else "nccl-log"

    @property
    def ranks(self) -> int | None:
        if self.tests is not None and self.tests.ranks:
            return self.tests.ranks
        return self.log.ranks if self.log is not None else None

    @property
    def hosts(self) -> list[str]:
        hosts: dict[str, None] = {}
        for source in (self.tests, self.log):
            if source is not None:
                hosts.update(dict.fromkeys(source.hosts))
        return list(hosts)

    @property
    def problems(self) -> list[str]:
        return [*(self.tests.problems if self.tests else []), *(self.log.problems if self.log else [])]

    @property
    def notes(self) -> list[str]:
        return [*(self.tests.notes if self.tests else []), *(self.log.notes if self.log else [])]

    @property
    def transport(self) -> str | None:
        return self.log.transport if self.log is not None else None

    @property
    def gpudirect_rdma(self) -> bool | None:
        return self.log.gpudirect_rdma if self.log is not None else None

    def to_json(self) -> dict[str, Any]:
        """The ``nccl parse --json`` object: stable keys, GB/s and bytes as numbers."""
        tests = self.tests
        runs = tests.runs if tests else []
        return {
            "file": self.file,
            "kind": self.kind,
            "collective": tests.collective if tests else None,
            "ranks": self.ranks,
            "hosts": self.hosts,
            "rows": [row.as_dict() for row in tests.rows] if tests else [],
            "avg_busbw_gbps": tests.avg_busbw_gbps if tests else None,
            "peak_busbw_gbps": tests.peak_busbw_gbps if tests else None,
            "transport": self.transport,
            "gpudirect_rdma": self.gpudirect_rdma,
            "problems": self.problems,
            "notes": self.notes,
            "runs": [
                {
                    "collective": run.collective,
                    "ranks": run.ranks,
                    "ranks_source": run.ranks_source,
                    "rows": len(run.rows),
                    "avg_busbw_gbps": run.avg_busbw_gbps,
                    "peak_busbw_gbps": run.peak_busbw_gbps,
                }
                for run in runs
            ],
            "processes": [p.as_dict() for p in self.log.processes] if self.log else [],
            "nccl_version": (self.log.nccl_version if self.log else None)
            or next((r.nccl_version for r in runs if r.nccl_version), None),
        }


def parse_text(text: str, name: str = "<text>") -> FileReport:
    """Parse text that may hold an nccl-tests table, NCCL INFO lines, or both."""
    tests = parse_nccl_tests(text)
    log = parse_nccl_log(text)
    if tests is None and log is None:
        raise UnreadableInput(f"{name}: no nccl-tests table or NCCL debug lines found")
    return FileReport(file=name, tests=tests, log=log)


def read_report(path: str | Path) -> FileReport:
    """Read and parse one file; UnreadableInput says why in one line when it cannot be."""
    path = Path(path)
    try:
        data = _bounded_read(path)
    except FileNotFoundError:
        raise UnreadableInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnreadableInput(f"{path}: is a directory") from None
    except OSError as err:
        raise UnreadableInput(f"{path}: cannot read ({err.strerror})") from None
    return parse_text(data.decode("utf-8", errors="replace"), str(path))


def _bounded_read(path: Path) -> bytes:
    """The file's bytes, refused unread past a binary head or MAX_REPORT_BYTES: `/dev/zero`, a device or a
    runaway log would otherwise be read whole into memory."""
    with path.open("rb") as handle:
        head = handle.read(_HEAD_BYTES)
        if b"\x00" in head:
            raise UnreadableInput(f"{path}: binary file, not text output")
        data = head + handle.read(MAX_REPORT_BYTES + 1 - len(head))
    if len(data) > MAX_REPORT_BYTES:
        raise UnreadableInput(f"{path}: larger than {MAX_REPORT_BYTES >> 20} MiB; not the output of one run")
    return data
