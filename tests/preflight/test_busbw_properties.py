"""Bus bandwidth arithmetic against nccl-tests' documented formulas, for every collective.

The formulas are nccl-tests' own (doc/PERFORMANCE.md, and each collective's `*GetBw` in src/*.cu,
nccl-tests 2.19.6): busbw = algbw × factor, with factor 2(n-1)/n for all-reduce (PERFORMANCE.md line
63; src/all_reduce.cu line 63), (n-1)/n for reduce-scatter (line 79; src/reduce_scatter.cu line 41),
all-gather (line 97; src/all_gather.cu line 42) and all-to-all (src/alltoall.cu line 52), and 1 for
broadcast (src/broadcast.cu line 38) and reduce (src/reduce.cu line 39); algbw = size / time. Tables
are printed as nccl-tests prints them (src/util.cu: `getFloatStr` fits the time into 7 characters,
bandwidths `%6.2f`, the average `%g` of every busbw, both columns, as common.cu accumulates it).
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_infra.preflight.nccl_tests import busbw_factor, parse_nccl_tests

DOCUMENTED = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
# Whether the printed size is every rank's share together (count × type size × n) or one buffer's.
PER_RANK_SIZE = {"all_gather", "reduce_scatter", "alltoall"}
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
ROOT = {"broadcast": 0, "reduce": 0}


def _time_str(us: float) -> str:
    """nccl-tests' getFloatStr(value, 7): two decimals if they fit in 7 characters, then one, then none."""
    for digits in (2, 1, 0):
        text = f"{us:7.{digits}f}"
        if len(text) <= 7:
            return text
    return f"{us:7.1e}"


def _table(collective: str, ranks: int, rows: list[tuple[int, float, float]]) -> tuple[str, list[float]]:
    """nccl-tests output for `rows` of (elements per rank, out-of-place µs, in-place µs); and the busbw printed."""
    lines = [
        "# nccl-tests version 2.13.10 nccl-headers=22105 nccl-library=22105",
        f"# Collective test starting: {collective}_perf",
        "#",
        "# Using devices",
    ]
    for r in range(ranks):
        host, dev = f"node-{r // 8:03d}", r % 8
        lines.append(
            f"#  Rank {r:2d} Group  0 Pid {60000 + r:6d} on {host:>10s} device {dev:2d} [0000:{0x18 + dev:02x}:00] "
            "NVIDIA H100 80GB HBM3"
        )
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
    ]
    printed: list[float] = []
    for count, t_out, t_in in rows:
        size = count * 4 * (ranks if collective in PER_RANK_SIZE else 1)
        cells = []
        for us in (t_out, t_in):
            algbw = size / 1e3 / us  # bytes / 1e9 / (us / 1e6)
            busbw = algbw * DOCUMENTED[collective](ranks)
            cells.append(f"{_time_str(us)}  {algbw:6.2f}  {busbw:6.2f}  {0:6d}")
            printed.append(float(f"{busbw:.2f}"))
        redop, root = REDOP.get(collective, "none"), ROOT.get(collective, -1)
        lines.append(f"{size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {root:6d}  " + "  ".join(cells))
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(printed) / len(printed):g} ", "#"]
    return "\n".join(lines) + "\n", printed


_rows = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=2**28),
        st.floats(min_value=5.0, max_value=5e6, allow_nan=False),
        st.floats(min_value=5.0, max_value=5e6, allow_nan=False),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda r: r[0],
).map(sorted)


@settings(max_examples=200, deadline=None)
@given(collective=st.sampled_from(sorted(DOCUMENTED)), ranks=st.integers(min_value=1, max_value=4096))
def test_the_factor_is_the_documented_one(collective: str, ranks: int) -> None:
    assert math.isclose(busbw_factor(collective, ranks), DOCUMENTED[collective](ranks), rel_tol=1e-12)


@settings(max_examples=150, deadline=None)
@given(collective=st.sampled_from(sorted(DOCUMENTED)), ranks=st.integers(min_value=2, max_value=64), rows=_rows)
def test_a_table_printed_by_the_documented_arithmetic_is_accepted(
    collective: str, ranks: int, rows: list[tuple[int, float, float]]
) -> None:
    text, printed = _table(collective, ranks, rows)
    report = parse_nccl_tests(text)
    assert report is not None
    assert report.problems == [], report.problems
    assert report.collective == collective and report.ranks == ranks
    measured = [v for row in report.rows for m in (row.out_of_place, row.in_place) if m for v in [m.busbw_gbps]]
    assert measured == printed
    assert report.peak_for(collective) == max(printed[0::2])  # the out-of-place column


@settings(max_examples=150, deadline=None)
@given(
    collective=st.sampled_from(sorted(DOCUMENTED)),
    ranks=st.integers(min_value=2, max_value=64),
    rows=_rows,
    which=st.integers(min_value=0),
    off=st.sampled_from([0.9, 1.1, 2.0]),
)
def test_a_busbw_off_the_documented_formula_is_caught(
    collective: str, ranks: int, rows: list[tuple[int, float, float]], which: int, off: float
) -> None:
    text, _ = _table(collective, ranks, rows)
    lines = text.splitlines()
    table = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    index = table[which % len(table)]
    cells = lines[index].split()
    if float(cells[7]) < 1.0:  # too small for a 10 % change to clear the printed rounding
        return
    cells[7] = f"{float(cells[7]) * off:.2f}"  # the out-of-place busbw
    lines[index] = "  ".join(cells)
    report = parse_nccl_tests("\n".join(lines))
    assert report is not None
    assert any("does not match" in p for p in report.problems), report.problems
