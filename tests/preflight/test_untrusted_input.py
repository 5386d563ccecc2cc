"""`grpo-infra nccl` reads what a job left behind: a NaN option or an endless file is bad input (exit 2),
never a PASS of the fabric gate or a MemoryError."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli.nccl import app
from grpo_infra.preflight import report

DATA = Path(__file__).parent / "data"
runner = CliRunner()
PASSING = ["verdict", str(DATA / "ib_ndr_2x8_h100_all_reduce.txt"), "--fabric", "infiniband"]
PASSING += ["--gpus-per-node", "8", "--nodes", "2", "--expected-busbw", "365.84"]  # ring-bound, as test_verdict.py


def test_the_passing_run_passes() -> None:
    result = runner.invoke(app, PASSING)
    assert result.exit_code == 0 and "PASS" in result.output


@pytest.mark.parametrize("option", ["--expected-busbw", "--fraction"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_threshold_that_is_not_a_finite_number_is_bad_input(option: str, value: str) -> None:
    result = runner.invoke(app, [*PASSING, option, value])
    assert result.exit_code == 2, result.output
    assert "PASS" not in result.output and option in result.output


def test_an_endless_binary_input_is_refused_unread() -> None:
    result = runner.invoke(app, ["parse", "/dev/zero"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: /dev/zero: binary file, not text output"


def test_a_text_input_past_the_bound_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "MAX_REPORT_BYTES", 1 << 20)
    log = tmp_path / "huge.log"
    log.write_text("NCCL INFO a line of a runaway log\n" * 40_000)
    result = runner.invoke(app, ["parse", str(log)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {log}: larger than 1 MiB; not the output of one run"
