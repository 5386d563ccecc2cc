"""Bad stacks exit 2 with one readable message naming file, field path and expectation; nothing written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app

CASES = sorted((Path(__file__).parent / "malformed").glob("*.yaml"))


def _expectations(case: Path) -> tuple[str, str]:
    lines = case.read_text().splitlines()
    path = lines[0].removeprefix("# expect-path:").strip()
    fragment = lines[1].removeprefix("# expect:").strip()
    return path, fragment


def _project_with(case: Path, tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text("name: grpo-infra\nruntime: python\nstackConfigDir: stacks\n")
    stack = case.stem
    shutil.copy(case, tmp_path / "stacks" / f"Pulumi.{stack}.yaml")
    return tmp_path, stack


def test_there_are_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_malformed_stack_is_refused(case: Path, tmp_path: Path) -> None:
    root, stack = _project_with(case, tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["synth", stack, "--root", str(root), "--out", str(out)])
    path, fragment = _expectations(case)
    message = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"stacks/Pulumi.{stack}.yaml" in message
    assert path in message
    assert " ".join(fragment.split()) in message
    assert result.exception is None or isinstance(result.exception, SystemExit), "refused by raising, not exiting"
    assert not out.exists(), "a refused stack must not write anything"


def test_refusal_from_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    case = next(c for c in CASES if "unknown-key" in c.stem)
    root, stack = _project_with(case, tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "grpo_infra.cli", "synth", stack, "--root", str(root), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr + run.stdout
    assert run.stderr.count("error:") == 1
    assert "interfce" in run.stderr


def test_missing_stack_lists_the_known_ones(root: Path) -> None:
    result = CliRunner().invoke(app, ["synth", "no-such-stack", "--root", str(root)])
    assert result.exit_code == 2
    assert "no such stack 'no-such-stack'" in result.output
    assert "local-slurm" in result.output


def test_existing_output_survives_a_refused_synth(tmp_path: Path) -> None:
    case = next(c for c in CASES if "zero-gpus" in c.stem)
    root, stack = _project_with(case, tmp_path)
    previous = tmp_path / "out" / stack / "kept.txt"
    previous.parent.mkdir(parents=True)
    previous.write_text("from an earlier synth")
    result = CliRunner().invoke(app, ["synth", stack, "--root", str(root), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert previous.read_text() == "from an earlier synth"
