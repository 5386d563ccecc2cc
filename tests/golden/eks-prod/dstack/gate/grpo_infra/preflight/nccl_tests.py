"""Read nccl-tests output as people paste it, and check that its numbers add up.

Formats handled (all seen in nccl-tests' history and in real pastes):

* column layouts: ``size count type redop root`` (2.11+), ``size count type redop`` (2.0-2.10),
  ``size count type root`` (old broadcast), ``bytes N type op`` (1.x), with ``#wrong`` (count of wrong
  elements), ``error`` (largest relative difference) or ``res`` result columns, and one (out-of-place)
  or two (out-of-place, in-place) measurement groups;
* lines tagged by mpirun, srun, pdsh or a timestamp; NCCL INFO lines between the rows; header lines
  without their ``#``; several runs in one file; the summary lines present, absent or marked FAILED.

Bandwidths are GB/s (1e9 bytes per second) and times microseconds, as nccl-tests prints them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ._lines import clean_lines

COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
)

# Bytes per element of every type name nccl-tests has printed (old and new spellings).
TYPE_SIZES: dict[str, int] = {
    "char": 1,
    "int8": 1,
    "uint8": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "int": 4,
    "int32": 4,
    "uint32": 4,
    "float": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "double": 8,
    "float64": 8,
}

# Largest tolerated value of the old ``error`` column per type (nccl-tests' own thresholds: reductions
# in half/bfloat16 are inexact, float and double almost exact, integers exact).
_ERROR_LIMITS: dict[str, float] = {
    "half": 5e-2,
    "float16": 5e-2,
    "bfloat16": 5e-2,
    "float": 1e-5,
    "float32": 1e-5,
    "double": 1e-12,
    "float64": 1e-12,
}

_REDOPS = {"sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"}


def busbw_factor(collective: str, nranks: int) -> float:
    """busbw / algbw for a collective on n ranks (nccl-tests doc/PERFORMANCE.md).

    all-reduce moves every byte 2(n-1)/n times per rank; all-gather, reduce-scatter and all-to-all
    (n-1)/n times; broadcast and reduce are bounded by the root's link, so their factor is 1.
    """
    if collective == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (nranks - 1) / nranks
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class Measurement:
    """One out-of-place or in-place group of a row, as printed."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None
    """``#wrong`` count, or the old ``error`` delta; None when printed as N/A."""
    text: tuple[str, str, str] = ("", "", "")
    """The printed time, algbw and busbw, kept to know how much rounding they carry."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
        }


@dataclass(frozen=True)
class Row:
    """One message size of the table."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None
    collective: str | None = None
    line: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.as_dict() if self.out_of_place else None,
            "in_place": self.in_place.as_dict() if self.in_place else None,
        }


@dataclass(frozen=True)
class RankInfo:
    """A ``#  Rank N Group G Pid P on HOST device D [bus] NAME`` line."""

    rank: int
    group: int
    pid: int
    host: str
    device: int
    gpu: str


@dataclass
class NcclTestsRun:
    """One run of one nccl-tests binary: its context, rows and findings."""

    collective: str | None = None
    collective_source: str | None = None
    ranks: int | None = None
    ranks_source: str | None = None
    rank_lines: list[RankInfo] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    avg_busbw_gbps: float | None = None
    max_bytes: int | None = None
    nccl_version: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # parse state
    columns: list[str] | None = None
    summary_seen: bool = False
    context_seen: bool = False
    cputime: bool = False
    cut_lines: set[int] = field(default_factory=set)

    @property
    def hosts(self) -> list[str]:
        return _unique(info.host for info in self.rank_lines)

    @property
    def peak_busbw_gbps(self) -> float | None:
        """Largest out-of-place busbw: in-place can be skewed by buffer reuse, out-of-place cannot."""
        values = [r.out_of_place.busbw_gbps for r in self.rows if r.out_of_place]
        if not values:
            values = [r.in_place.busbw_gbps for r in self.rows if r.in_place]
        return max(values) if values else None


@dataclass
class NcclTestsReport:
    """Everything found in one file of nccl-tests output."""

    runs: list[NcclTestsRun]
    problems: list[str]
    notes: list[str]

    @property
    def collective(self) -> str | None:
        names = _unique(run.collective for run in self.runs if run.collective)
        if len(names) > 1:
            return "mixed"
        return names[0] if names else None

    @property
    def ranks(self) -> int | None:
        values = [run.ranks for run in self.runs if run.ranks]
        return max(values) if values else None

    @property
    def hosts(self) -> list[str]:
        return _unique(host for run in self.runs for host in run.hosts)

    @property
    def rows(self) -> list[Row]:
        return [row for run in self.runs for row in run.rows]

    @property
    def peak_busbw_gbps(self) -> float | None:
        values = [run.peak_busbw_gbps for run in self.runs if run.peak_busbw_gbps is not None]
        return max(values) if values else None

    @property
    def avg_busbw_gbps(self) -> float | None:
        """The printed average of the (first) run that printed one; None when none did."""
        for run in self.runs:
            if run.avg_busbw_gbps is not None:
                return run.avg_busbw_gbps
        return None

    def peak_for(self, collective: str) -> float | None:
        """Peak out-of-place busbw among runs of one collective."""
        values = [
            run.peak_busbw_gbps for run in self.runs if run.collective == collective and run.peak_busbw_gbps is not None
        ]
        return max(values) if values else None


def _unique(items: Any) -> list[Any]:
    seen: dict[Any, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


# --- line recognisers -------------------------------------------------------------------------

_PERF_NAME = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce)_perf(?:_mpi)?\b")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_NTHREAD = re.compile(r"nThread\s+\d+\s+nGpus\s+\d+\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_REDUCING = re.compile(r"Reducing maxBytes to\s+(\d+)")
_RANK = re.compile(
    r"Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[[^\]]*\]\s*(?P<gpu>.*)$"
)
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(\w+)?")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)\s*(\w+)?", re.IGNORECASE)
_NCCL_VERSION = re.compile(r"NCCL version\s+(\S+)")
_NCCL_FAILURE = re.compile(r"Test NCCL failure\s+(\S+)\s+'([^']*)'?")
_CUDA_FAILURE = re.compile(r"(?:Test )?CUDA failure\s+(\S+)\s+'([^']*)'?", re.IGNORECASE)
_TEST_FAILURE = re.compile(r"Test failure\s+(\S+)")
_TIMEOUT = re.compile(r"Test timeout \((\d+)s\)")
_NCCL_LINE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_NUM = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_INT = re.compile(r"^-?\d+$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _is_num(token: str) -> bool:
    return bool(_NUM.match(token))


def _header_columns(line: str) -> list[str] | None:
    """Column names of a table header line, with or without its leading '#'."""
    body = line.lstrip("#").strip()
    tokens = body.split()
    if "algbw" in tokens and "busbw" in tokens and tokens[:1] in (["size"], ["bytes"]):
        return tokens
    return None


def _half_ulp(text: str) -> float:
    """Half the last printed digit of a number: how far the printed value may be from the true one."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    scale = 10.0 ** int(exponent) if exponent else 1.0
    return 0.5 * 10.0**-decimals * scale


# --- parsing ----------------------------------------------------------------------------------


def parse_nccl_tests(text: str) -> NcclTestsReport | None:
    """Parse nccl-tests output; None when the text holds nothing from nccl-tests."""
    runs: list[NcclTestsRun] = []
    file_problems: list[str] = []
    file_notes: list[str] = []
    run = NcclTestsRun()
    pending_name: tuple[str, str] | None = None
    recognised = False

    def start_new_run() -> NcclTestsRun:
        nonlocal run
        if run.rows or run.summary_seen or run.rank_lines or run.columns:
            runs.append(run)
        run = NcclTestsRun()
        return run

    for number, line in enumerate(clean_lines(text), start=1):
        if not line.strip():
            continue
        stripped = line.strip()

        failure = _failure_message(stripped)
        if failure:
            recognised = True
            run.problems.append(failure)
            continue

        if _NCCL_LINE.search(stripped):
            continue  # INFO/WARN lines between rows belong to the log reader

        match = _STARTING.search(stripped)
        if match:
            recognised = True
            if run.rows or run.summary_seen or run.context_seen:
                start_new_run()
            run.context_seen = True
            name = _PERF_NAME.search(match.group(1))
            if name:
                run.collective, run.collective_source = name.group(1), "header"
            continue

        match = _NTHREAD.search(stripped)
        if match:
            recognised = True
            if run.rows or run.summary_seen or (run.context_seen and run.max_bytes is not None):
                start_new_run()
            run.context_seen = True
            run.max_bytes = int(match.group(2))
            if run.collective is None and pending_name:
                run.collective, run.collective_source = pending_name
            continue

        match = _REDUCING.search(stripped)
        if match:
            run.max_bytes = int(match.group(1))
            run.notes.append(f"nccl-tests lowered maxBytes to {int(match.group(1))} B for lack of GPU memory")
            continue

        match = _RANK.search(stripped)
        if match and ("#" in line or stripped.startswith("Rank")):
            recognised = True
            if run.rows or run.summary_seen:
                start_new_run()
            run.context_seen = True
            run.rank_lines.append(
                RankInfo(
                    rank=int(match["rank"]),
                    group=int(match["group"] or 0),
                    pid=int(match["pid"]),
                    host=match["host"],
                    device=int(match["device"]),
                    gpu=match["gpu"].strip(),
                )
            )
            continue

        columns = _header_columns(stripped)
        if columns:
            recognised = True
            if run.rows or run.summary_seen:
                start_new_run()
            run.columns = columns
            run.cputime = "cputime" in columns
            if run.collective is None and pending_name:
                run.collective, run.collective_source = pending_name
            continue

        match = _OOB.search(stripped)
        if match:
            recognised = True
            run.summary_seen = True
            bad = int(match.group(1))
            if bad or (match.group(2) or "").upper() == "FAILED":
                run.problems.append(
                    f"nccl-tests found wrong results: 'Out of bounds values : {bad} FAILED' "
                    "(data corruption on the fabric or a broken GPU/NIC)"
                )
            continue

        match = _AVG.search(stripped)
        if match:
            recognised = True
            run.summary_seen = True
            value = float(match.group(1))
            run.avg_busbw_gbps = None if math.isnan(value) else value
            if (match.group(2) or "").upper() == "FAILED":
                run.problems.append(
                    f"nccl-tests marked the average bus bandwidth {value:g} GB/s FAILED "
                    "(below 90% of NCCL_TESTS_MIN_BW)"
                )
            continue

        match = _NCCL_VERSION.search(stripped)
        if match and not stripped.startswith("#"):
            run.nccl_version = match.group(1)
            continue

        row = _parse_row(stripped, run, number)
        if row is not None:
            recognised = True
            _check_interleaving(run, row)
            run.rows.append(row)
            continue

        if number in run.cut_lines:
            continue
        if not stripped.startswith("#") and re.search(r"^\s*\d+\s+\d+\s+[A-Za-z]\w*", stripped):
            recognised = True
            run.problems.append(f"line {number}: table row cut off: {stripped!r}")
            continue

        name = _PERF_NAME.search(stripped)
        if name:
            pending_name = (name.group(1), "command line")
            if run.collective is None and (run.columns is None or not run.rows):
                run.collective, run.collective_source = pending_name

    if run.rows or run.summary_seen or run.rank_lines or run.columns or run.problems:
        runs.append(run)
    if not recognised or not runs:
        return None

    for each in runs:
        _finish_run(each)
    many = len(runs) > 1
    for index, each in enumerate(runs, start=1):
        label = f"run {index} ({each.collective or 'unknown collective'}): " if many else ""
        file_problems.extend(label + p for p in each.problems)
        file_notes.extend(label + n for n in each.notes)
    return NcclTestsReport(runs=runs, problems=file_problems, notes=file_notes)


def _failure_message(line: str) -> str | None:
    """A one-line description of an nccl-tests failure printed on this line, if any."""
    match = _NCCL_FAILURE.search(line)
    if match:
        return f"NCCL call failed at {match.group(1)}: '{match.group(2).strip()}'"
    match = _CUDA_FAILURE.search(line)
    if match:
        return f"CUDA call failed at {match.group(1)}: '{match.group(2).strip()}'"
    match = _TIMEOUT.search(line)
    if match:
        return f"nccl-tests timed out after {match.group(1)} s (a hang in the collective)"
    match = _TEST_FAILURE.search(line)
    if match:
        return f"nccl-tests aborted at {match.group(1)}"
    return None


def _parse_row(line: str, run: NcclTestsRun, number: int) -> Row | None:
    """Parse one data row, using the header's columns when there was one."""
    if line.startswith("#"):
        return None
    tokens = line.split()
    if len(tokens) < 7 or not (_INT.match(tokens[0]) and _INT.match(tokens[1])):
        return None
    if not _WORD.match(tokens[2]):
        return None
    size, count, dtype = int(tokens[0]), int(tokens[1]), tokens[2]
    rest = tokens[3:]
    redop: str | None = None
    if rest and _WORD.match(rest[0]) and rest[0] != "N":
        redop = rest[0]
        rest = rest[1:]
    columns = run.columns
    if columns is not None:
        has_root = "root" in columns
        groups = columns.count("busbw")
        wrong_names = [c for c in columns if c in ("#wrong", "wrong", "error", "res")]
        wrong_kind = "count" if wrong_names and wrong_names[0] in ("#wrong", "wrong") else "error"
    else:
        has_root = len(rest) % 4 == 1
        groups = 2 if len(rest) - int(has_root) >= 8 else 1
        wrong_kind = "auto"
    root: int | None = None
    if has_root:
        if not rest or not _INT.match(rest[0]):
            return None
        root = int(rest[0])
        rest = rest[1:]
    measurements: list[Measurement | None] = []
    for group in range(groups):
        chunk = rest[group * 4 : group * 4 + 4]
        if len(chunk) < 4:
            if group == 0 and not chunk:
                return None
            run.problems.append(
                f"line {number}: row for {size} B is cut off after {len(chunk)} of 4 "
                f"{'in-place' if group else 'out-of-place'} values (truncated output)"
            )
            run.cut_lines.add(number)
            if group == 0:
                return None  # half a measurement is no measurement
            measurements.append(None)
            break
        if not all(_is_num(t) for t in chunk[:3]):
            return None
        wrong_text = chunk[3]
        wrong = None if wrong_text.upper() == "N/A" else _to_float(wrong_text)
        measurements.append(
            Measurement(
                time_us=float(chunk[0]),
                algbw_gbps=float(chunk[1]),
                busbw_gbps=float(chunk[2]),
                wrong=wrong,
                text=(chunk[0], chunk[1], chunk[2]),
            )
        )
        _check_wrong(run, number, size, dtype, wrong, wrong_text, wrong_kind, "in-place" if group else "out-of-place")
    while len(measurements) < 2:
        measurements.append(None)
    return Row(
        size_bytes=size,
        count=count,
        dtype=dtype,
        redop=redop,
        root=root,
        out_of_place=measurements[0],
        in_place=measurements[1],
        line=number,
    )


def _check_interleaving(run: NcclTestsRun, row: Row) -> None:
    """A size printed twice for the same type, operation and root under one header means two processes
    wrote their tables into one output (independent runs: nccl-tests built without MPI, or two jobs)."""
    key = (row.size_bytes, row.dtype, row.redop, row.root)
    if any((r.size_bytes, r.dtype, r.redop, r.root) == key for r in run.rows) and not any(
        "interleaved" in p for p in run.problems
    ):
        run.problems.append(
            f"line {row.line}: {row.size_bytes} B {row.dtype} is printed again under the same header: rows of "
            "more than one run are interleaved (independent processes, not one job; build nccl-tests with MPI=1)"
        )


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _check_wrong(
    run: NcclTestsRun,
    number: int,
    size: int,
    dtype: str,
    wrong: float | None,
    text: str,
    kind: str,
    where: str,
) -> None:
    """Flag rows whose result check failed: a non-zero #wrong, or an error delta over the type's limit."""
    if wrong is None or wrong == 0:
        return
    if kind == "auto":
        kind = "error" if ("e" in text.lower() or "." in text) else "count"
    if kind == "count":
        run.problems.append(
            f"line {number}: {size} B {where}: {text} wrong elements (#wrong must be 0; data corruption)"
        )
        return
    limit = _ERROR_LIMITS.get(dtype, 0.0)
    if abs(wrong) > limit:
        run.problems.append(
            f"line {number}: {size} B {where}: error {text} exceeds the {dtype} limit {limit:g} (wrong results)"
        )


def _infer_collective(run: NcclTestsRun) -> None:
    """Guess the collective from the table when neither the header nor a command line named it."""
    if run.collective or not run.rows:
        return
    row = max(run.rows, key=lambda r: r.size_bytes)
    has_redop = any(r.redop not in (None, "none") for r in run.rows)
    roots = {r.root for r in run.rows if r.root is not None}
    columns = run.columns or []
    rooted = any(root >= 0 for root in roots) or ("root" in columns and "redop" not in columns and "op" not in columns)
    if rooted:
        run.collective = "reduce" if has_redop else "broadcast"
        run.collective_source = "columns"
        return
    width = TYPE_SIZES.get(row.dtype)
    multiple = row.size_bytes / (row.count * width) if width and row.count else None
    if has_redop:
        if multiple is not None and multiple > 1.5:
            run.collective, run.collective_source = "reduce_scatter", "columns"
        else:
            run.collective, run.collective_source = "all_reduce", "columns"
        return
    # No reduction and no root: all-gather or all-to-all. Both print size = n x count x width and
    # share the (n-1)/n factor, so the busbw check still holds; only the name stays unknown.
    run.notes.append(
        "collective not named in the output: the columns fit all_gather or alltoall (both use the (n-1)/n busbw factor)"
    )
    run.collective_source = "columns:all_gather|alltoall"


def _factor_family(run: NcclTestsRun) -> str | None:
    if run.collective:
        return run.collective
    if run.collective_source == "columns:all_gather|alltoall":
        return "all_gather"
    return None


def _infer_ranks(run: NcclTestsRun) -> None:
    """Ranks of the communicator: from the rank lines, else from the figures themselves."""
    if run.rank_lines:
        by_rank: dict[int, set[int]] = {}
        for info in run.rank_lines:
            by_rank.setdefault(info.rank, set()).add(info.pid)
        duplicated = sorted(rank for rank, pids in by_rank.items() if len(pids) > 1)
        if duplicated:
            run.problems.append(
                f"rank {duplicated[0]} is printed by {len(by_rank[duplicated[0]])} processes: these are "
                "independent single-rank runs, not one job (build nccl-tests with MPI=1)"
            )
        group0 = {info.rank for info in run.rank_lines if info.group == run.rank_lines[0].group}
        run.ranks, run.ranks_source = len(group0), "rank lines"
        return
    family = _factor_family(run)
    if not run.rows or family is None:
        return
    row = max(run.rows, key=lambda r: r.size_bytes)
    width = TYPE_SIZES.get(row.dtype)
    if family in ("all_gather", "reduce_scatter", "alltoall") and width and row.count:
        ranks = round(row.size_bytes / (row.count * width))
        if ranks >= 1:
            run.ranks, run.ranks_source = ranks, "size/count"
            return
    if family == "all_reduce":
        measured = row.out_of_place or row.in_place
        if measured and measured.algbw_gbps > 0 and measured.busbw_gbps > 0:
            ratio = measured.busbw_gbps / measured.algbw_gbps
            if ratio < 1.999:
                run.ranks, run.ranks_source = max(1, round(2.0 / (2.0 - ratio))), "busbw/algbw"


def _finish_run(run: NcclTestsRun) -> None:
    """Derive what the text did not say, then check the figures."""
    _infer_collective(run)
    _infer_ranks(run)
    if run.columns and not run.rows and not run.problems:
        run.problems.append("the table header is there but no row follows (the run died before the first size)")
    if run.rows and not run.summary_seen:
        largest = max(r.size_bytes for r in run.rows)
        if run.max_bytes is not None and largest * 2 <= run.max_bytes and not run.problems:
            run.problems.append(
                f"the table stops at {largest} B before maxBytes {run.max_bytes} B and has no summary "
                "lines: the run was cut short"
            )
        elif not run.problems:
            run.notes.append("no '# Avg bus bandwidth' line: the output may be a partial paste")
    _check_bandwidths(run)
    _check_average(run)


def _check_bandwidths(run: NcclTestsRun) -> None:
    """Check busbw = algbw x factor and algbw = size / time on every row, within printed rounding."""
    family = _factor_family(run)
    if family is None:
        if run.rows:
            run.notes.append("collective unknown: busbw was not checked against algbw")
        return
    if run.ranks is None and family not in ("broadcast", "reduce"):
        run.notes.append("number of ranks unknown: busbw was not checked against algbw")
        return
    implied = _implied_ranks(run, family)
    # A paste shortens a rank list, it never lengthens one: only more ranks than listed can explain the figures.
    if implied is not None and implied > (run.ranks or 0) and run.ranks_source == "rank lines":
        stated_bad = _busbw_mismatches(run, family, run.ranks or 1)
        if stated_bad * 2 >= len(_measurements(run)) and not _busbw_mismatches(run, family, implied):
            run.notes.append(
                f"the rank lines list {run.ranks} ranks but the rows' busbw/algbw fits {implied}: "
                "the rank list was shortened (the figures themselves are consistent)"
            )
            run.ranks, run.ranks_source = implied, "busbw/algbw"
    factor = busbw_factor(family, run.ranks or 1)
    for row in run.rows:
        for where, m in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
            if m is None:
                continue
            t_text, a_text, b_text = m.text
            tolerance = _half_ulp(a_text) * factor + _half_ulp(b_text) + 1e-9
            expected_bus = m.algbw_gbps * factor
            if abs(m.busbw_gbps - expected_bus) > tolerance:
                run.problems.append(
                    f"line {row.line}: {row.size_bytes} B {where}: busbw {b_text} GB/s does not match "
                    f"algbw {a_text} GB/s x {factor:.4g} ({family}, {run.ranks} ranks) = "
                    f"{expected_bus:.2f} GB/s"
                )
            if run.cputime or m.time_us <= 0:
                continue
            # algbw = size / time; time carries its own rounding, so compare within both roundings.
            dt = _half_ulp(t_text)
            low = row.size_bytes / ((m.time_us + dt) * 1e3)
            high = row.size_bytes / (max(m.time_us - dt, 1e-12) * 1e3)
            slack = _half_ulp(a_text) + 1e-9
            if not (low - slack <= m.algbw_gbps <= high + slack):
                run.problems.append(
                    f"line {row.line}: {row.size_bytes} B {where}: algbw {a_text} GB/s does not match "
                    f"size / time = {row.size_bytes / (m.time_us * 1e3):.2f} GB/s"
                )


def _measurements(run: NcclTestsRun) -> list[Measurement]:
    return [m for row in run.rows for m in (row.out_of_place, row.in_place) if m is not None]


def _busbw_mismatches(run: NcclTestsRun, family: str, nranks: int) -> int:
    """How many printed measurements do not satisfy busbw = algbw x factor(n)."""
    factor = busbw_factor(family, nranks)
    bad = 0
    for m in _measurements(run):
        tolerance = _half_ulp(m.text[1]) * factor + _half_ulp(m.text[2]) + 1e-9
        if abs(m.busbw_gbps - m.algbw_gbps * factor) > tolerance:
            bad += 1
    return bad


def _implied_ranks(run: NcclTestsRun, family: str) -> int | None:
    """The rank count the largest row's busbw/algbw implies, for collectives whose factor depends on n."""
    if family in ("broadcast", "reduce") or not run.rows:
        return None
    best = max(_measurements(run), key=lambda m: m.algbw_gbps, default=None)
    if best is None or best.algbw_gbps <= 0 or best.busbw_gbps <= 0:
        return None
    ratio = best.busbw_gbps / best.algbw_gbps
    gap = (2.0 if family == "all_reduce" else 1.0) - ratio
    if gap <= 1e-3:
        return None
    return max(1, round((2.0 if family == "all_reduce" else 1.0) / gap))


def _check_average(run: NcclTestsRun) -> None:
    """The printed average is the mean busbw of every printed measurement; a mismatch means edits."""
    if run.avg_busbw_gbps is None or not run.rows:
        return
    values: list[float] = []
    slack = 0.0
    for row in run.rows:
        for m in (row.out_of_place, row.in_place):
            if m is not None:
                values.append(m.busbw_gbps)
                slack += _half_ulp(m.text[2])
    if not values:
        return
    mean = sum(values) / len(values)
    tolerance = slack / len(values) + 0.005 * max(mean, run.avg_busbw_gbps) + 0.01
    if abs(mean - run.avg_busbw_gbps) > tolerance:
        run.problems.append(
            f"printed average bus bandwidth {run.avg_busbw_gbps:g} GB/s differs from the mean of the "
            f"table's busbw values ({mean:.3f} GB/s): rows are missing or were edited"
        )
