"""``grpo-infra nccl``: read nccl-tests output and NCCL logs, and gate a fabric on them.

Exit codes: ``parse`` 0 when every file was read, 2 when one could not be; ``verdict`` 0 on pass,
1 on fail, 2 on unreadable input or bad options.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from grpo_infra.preflight.report import FileReport, UnreadableInput, read_report
from grpo_infra.preflight.verdict import DEFAULT_FRACTION, GATE_FABRICS, fabric_verdict

app = typer.Typer(
    name="nccl",
    help="Parse nccl-tests output and NCCL_DEBUG=INFO logs; gate a fabric on them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

FilesArg = Annotated[
    list[Path], typer.Argument(help="nccl-tests output and/or NCCL_DEBUG=INFO logs (one run per file).")
]


def _read_all(files: list[Path], err: Console) -> tuple[list[FileReport], bool]:
    """Read every file; report each unreadable one on one line of stderr."""
    reports: list[FileReport] = []
    failed = False
    for path in files:
        try:
            reports.append(read_report(path))
        except UnreadableInput as exc:
            err.print(f"error: {exc}", markup=False, highlight=False)
            failed = True
    return reports, failed


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _summary_table(reports: list[FileReport]) -> Table:
    table = Table(title="NCCL preflight", title_justify="left")
    for name, justify in (
        ("File", "left"),
        ("Kind", "left"),
        ("Collective", "left"),
        ("Ranks", "right"),
        ("Hosts", "right"),
        ("Peak busbw (GB/s)", "right"),
        ("Avg busbw (GB/s)", "right"),
        ("Transport", "left"),
        ("GPUDirect RDMA", "left"),
        ("Problems", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in reports:
        tests = r.tests
        table.add_row(
            r.file,
            r.kind + (" + log" if r.tests is not None and r.log is not None else ""),
            (tests.collective if tests else None) or "-",
            str(r.ranks) if r.ranks else "-",
            str(len(r.hosts)) if r.hosts else "-",
            _fmt(tests.peak_busbw_gbps if tests else None),
            _fmt(tests.avg_busbw_gbps if tests else None),
            r.transport or "-",
            _yes_no(r.gpudirect_rdma) if r.log is not None else "-",
            str(len(r.problems)),
        )
    return table


def _rows_table(report: FileReport) -> Table:
    table = Table(title=f"{report.file}: rows", title_justify="left")
    for name in (
        "Size (B)",
        "Type",
        "Op",
        "Time (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "#wrong",
        "in-place time (us)",
        "in-place busbw (GB/s)",
    ):
        table.add_column(name, justify="right")
    for row in report.tests.rows if report.tests else []:
        oop, ip = row.out_of_place, row.in_place
        table.add_row(
            str(row.size_bytes),
            row.dtype,
            row.redop or "-",
            _fmt(oop.time_us) if oop else "-",
            _fmt(oop.algbw_gbps) if oop else "-",
            _fmt(oop.busbw_gbps) if oop else "-",
            "N/A" if oop is None or oop.wrong is None else f"{oop.wrong:g}",
            _fmt(ip.time_us) if ip else "-",
            _fmt(ip.busbw_gbps) if ip else "-",
        )
    return table


@app.command()
def parse(
    files: FilesArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per file.")] = False,
    rows: Annotated[bool, typer.Option("--rows", help="Also print every table row.")] = False,
) -> None:
    """Report collective, ranks, hosts, bus bandwidth (GB/s), transport and problems per file."""
    # Pipes and CI logs get a wide table so the unit labels are not cut.
    out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 180)
    err = Console(stderr=True, soft_wrap=True)
    reports, failed = _read_all(files, err)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in reports], indent=2))
    elif reports:
        out.print(_summary_table(reports))
        for report in reports:
            if rows and report.tests is not None:
                out.print(_rows_table(report))
            for problem in report.problems:
                out.print(f"[red]problem[/red] {report.file}: ", end="")
                out.print(problem, markup=False, highlight=False)
            for note in report.notes:
                out.print(f"[dim]note[/dim] {report.file}: ", end="")
                out.print(note, markup=False, highlight=False)
    if failed:
        raise typer.Exit(2)


@app.command()
def verdict(
    files: FilesArg,
    fabric: Annotated[str, typer.Option("--fabric", help=f"Expected fabric: {' | '.join(GATE_FABRICS)}.")],
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1, help="GPUs per node in the pool.")],
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Nodes the test ran across.")],
    expected_busbw: Annotated[
        float | None,
        typer.Option("--expected-busbw", help="Expected all-reduce busbw in GB/s, above 0 (default per fabric)."),
    ] = None,
    fraction: Annotated[
        float, typer.Option("--fraction", min=0.0, max=1.0, help="Pass when peak busbw >= fraction x expected.")
    ] = DEFAULT_FRACTION,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Pass (exit 0) or fail (exit 1) the fabric: no socket fallback, peak busbw over the threshold."""
    out = Console(soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    if fabric not in GATE_FABRICS:
        err.print(f"error: --fabric must be one of {', '.join(GATE_FABRICS)}, got {fabric!r}", markup=False)
        raise typer.Exit(2)
    # NaN compares false with every bound, so it would pass each check below and then the gate itself.
    if not math.isfinite(fraction) or fraction <= 0:
        err.print("error: --fraction must be above 0, a finite number", markup=False)
        raise typer.Exit(2)
    if expected_busbw is not None and (not math.isfinite(expected_busbw) or expected_busbw <= 0):
        err.print(
            "error: --expected-busbw must be above 0 GB/s, a finite number (a zero threshold passes anything)",
            markup=False,
        )
        raise typer.Exit(2)
    reports, failed = _read_all(files, err)
    if failed:
        raise typer.Exit(2)
    result = fabric_verdict(
        reports,
        fabric=fabric,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        expected_busbw_gbps=expected_busbw,
        fraction=fraction,
    )
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    else:
        word = "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]"
        out.print(
            f"{word} fabric={fabric} transport={result.transport or 'unknown'} "
            f"peak busbw={_fmt(result.peak_busbw_gbps)} GB/s "
            f"{result.threshold_text}"
        )
        for reason in result.reasons:
            out.print("  fail: ", end="")
            out.print(reason, markup=False, highlight=False)
        for note in result.notes:
            out.print("  note: ", end="")
            out.print(note, markup=False, highlight=False)
    if not result.passed:
        raise typer.Exit(1)
