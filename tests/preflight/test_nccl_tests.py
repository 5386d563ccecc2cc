"""nccl-tests output as people paste it: every layout parses, and figures that do not add up are flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.preflight import busbw_factor, parse_nccl_tests, parse_text, read_report

DATA = Path(__file__).parent / "data"


def _tests(name: str):
    report = read_report(DATA / name)
    assert report.tests is not None
    return report.tests


@pytest.mark.parametrize(
    ("collective", "nranks", "factor"),
    [
        ("all_reduce", 16, 2 * 15 / 16),
        ("all_reduce", 2, 1.0),
        ("all_gather", 8, 7 / 8),
        ("reduce_scatter", 16, 15 / 16),
        ("alltoall", 16, 15 / 16),
        ("broadcast", 16, 1.0),
        ("reduce", 16, 1.0),
    ],
)
def test_busbw_factors_follow_nccl_tests_performance_doc(collective: str, nranks: int, factor: float) -> None:
    assert busbw_factor(collective, nranks) == pytest.approx(factor)


def test_ndr_infiniband_all_reduce_is_read_completely() -> None:
    tests = _tests("ib_ndr_2x8_h100_all_reduce.txt")
    assert tests.collective == "all_reduce"
    assert tests.ranks == 16
    assert tests.hosts == ["gpu-a01", "gpu-a02"]
    assert len(tests.rows) == 15  # 1 MiB .. 16 GiB, NCCL INFO lines between rows skipped
    assert tests.rows[0].size_bytes == 1048576 and tests.rows[0].redop == "sum" and tests.rows[0].root == -1
    assert 350 <= tests.peak_busbw_gbps <= 480
    assert tests.avg_busbw_gbps == pytest.approx(286.493)
    assert tests.problems == []


def test_tampered_busbw_is_flagged_with_its_line() -> None:
    tests = _tests("ib_tampered_busbw.txt")
    assert any("4294967296 B out-of-place: busbw" in p and "does not match" in p for p in tests.problems)
    # the edited row also no longer averages to the printed figure
    assert any("printed average" in p for p in tests.problems)


def test_mpirun_tagged_efa_output_parses() -> None:
    tests = _tests("efa_p5_2x8_all_reduce_mpirun.txt")
    assert tests.collective == "all_reduce"
    assert tests.ranks == 16 and len(tests.hosts) == 2
    assert len(tests.rows) == 11
    # The largest out-of-place busbw printed: the 8589934592 B row's 320.70 GB/s.
    assert tests.peak_busbw_gbps == pytest.approx(320.70)
    assert tests.problems == []


def test_host_prefixed_socket_fallback_gives_a_few_gbps() -> None:
    tests = _tests("socket_fallback_2x8_all_reduce.txt")
    assert tests.ranks == 16
    assert tests.peak_busbw_gbps is not None and tests.peak_busbw_gbps < 5
    assert tests.problems == []


def test_old_layout_with_error_column_and_no_group() -> None:
    tests = _tests("old_layout_error_column.txt")
    assert tests.collective == "all_reduce"  # from the 2(n-1)/n columns: redop, size = count x 4
    assert tests.ranks == 8 and tests.hosts == ["dgx1-07"]
    assert all(r.root is None for r in tests.rows)
    assert tests.rows[0].out_of_place.wrong == pytest.approx(2e-07)  # float error delta, not a failure
    assert tests.problems == []


def test_old_broadcast_with_root_column_and_headers_missing_hash() -> None:
    tests = _tests("broadcast_old_no_hash.txt")
    assert tests.collective == "broadcast"
    assert all(r.root == 0 and r.redop is None for r in tests.rows)
    assert tests.problems == []


@pytest.mark.parametrize(
    ("name", "collective", "redop"),
    [
        ("all_gather_2x8_new_layout.txt", "all_gather", "none"),
        ("reduce_scatter_2x8_new_layout.txt", "reduce_scatter", "sum"),
        ("alltoall_2x8_new_layout.txt", "alltoall", "none"),
        ("reduce_2x8_new_layout.txt", "reduce", "sum"),
    ],
)
def test_every_collective_checks_out_with_its_factor(name: str, collective: str, redop: str) -> None:
    tests = _tests(name)
    assert tests.collective == collective
    assert tests.ranks == 16
    assert {r.redop for r in tests.rows} == {redop}
    assert tests.problems == []


def test_alltoall_in_place_na_is_not_a_failure() -> None:
    tests = _tests("alltoall_2x8_new_layout.txt")
    assert all(r.in_place is not None and r.in_place.wrong is None for r in tests.rows)


def test_old_alltoall_with_blank_redop_infers_ranks_from_size_and_count() -> None:
    tests = _tests("alltoall_old_blank_redop.txt")
    assert tests.ranks == 8
    assert tests.collective is None  # all_gather and alltoall print the same columns
    assert any("all_gather or alltoall" in n for n in tests.notes)
    assert tests.problems == []


def test_table_without_rank_lines_or_average() -> None:
    tests = _tests("table_only_no_avg.txt")
    assert tests.avg_busbw_gbps is None
    assert tests.ranks == 16  # from busbw / algbw = 2(n-1)/n
    assert tests.problems == []


def test_nccl_failure_is_reported() -> None:
    tests = _tests("failed_nccl_failure.txt")
    assert tests.rows == []
    assert any("NCCL call failed at common.cu:1279" in p and "unhandled system error" in p for p in tests.problems)


def test_truncated_table_is_flagged() -> None:
    tests = _tests("truncated_all_reduce.txt")
    assert any("cut off" in p for p in tests.problems)
    assert max(r.size_bytes for r in tests.rows) == 134217728


def test_table_stopping_short_of_max_bytes_without_summary_is_flagged() -> None:
    text = (DATA / "truncated_all_reduce.txt").read_text().splitlines()[:-1]
    tests = parse_nccl_tests("\n".join(text))
    assert tests is not None
    assert any("before maxBytes 17179869184" in p for p in tests.problems)


def test_wrong_elements_and_out_of_bounds_failed() -> None:
    tests = _tests("wrong_results.txt")
    assert any("wrong elements" in p for p in tests.problems)
    assert any("Out of bounds values : 1 FAILED" in p for p in tests.problems)


def test_srun_labels_are_stripped() -> None:
    text = (DATA / "table_only_no_avg.txt").read_text()
    labelled = "\n".join(f"0: {line}" for line in text.splitlines())
    tests = parse_nccl_tests(labelled)
    assert tests is not None and len(tests.rows) == 7 and tests.problems == []


def test_two_runs_in_one_file_are_kept_apart() -> None:
    text = (DATA / "ib_ndr_2x8_h100_all_reduce.txt").read_text() + (DATA / "all_gather_2x8_new_layout.txt").read_text()
    tests = parse_text(text).tests
    assert tests is not None
    assert [run.collective for run in tests.runs] == ["all_reduce", "all_gather"]
    assert tests.collective == "mixed"
    assert tests.problems == []
    assert tests.peak_for("all_reduce") == pytest.approx(375.43)


def test_single_process_runs_started_without_mpi_are_flagged() -> None:
    line = "#  Rank  0 Group  0 Pid {pid} on gpu-a01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3"
    header = (DATA / "table_only_no_avg.txt").read_text()
    text = "\n".join([line.format(pid=100), line.format(pid=101), header])
    tests = parse_nccl_tests(text)
    assert tests is not None
    assert tests.problems == [
        "rank 0 is printed by 2 processes: these are independent single-rank runs, not one job "
        "(build nccl-tests with MPI=1)"
    ]


def test_shortened_rank_list_is_a_note_not_a_busbw_failure() -> None:
    lines = (DATA / "ib_ndr_2x8_h100_all_reduce.txt").read_text().splitlines()
    kept = [line for line in lines if not (line.startswith("#  Rank") and " 0 [" not in line[40:])]
    tests = parse_nccl_tests("\n".join(kept))
    assert tests is not None
    assert tests.ranks == 16
    assert not any("does not match" in p for p in tests.problems)
    assert any("rank list was shortened" in n for n in tests.notes)
