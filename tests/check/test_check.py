"""`check` refuses infeasible stacks with a table of what, where and by how much; `synth` refuses too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from tests.conftest import ROOT, SHIPPED_STACKS

CASES = sorted((Path(__file__).parent / "infeasible").glob("*.yaml"))


def _expect(case: Path) -> dict[str, str]:
    head = case.read_text().splitlines()[:3]
    return {line.split(":", 1)[0].removeprefix("# expect-"): line.split(":", 1)[1].strip() for line in head}


def _project(case: Path, tmp_path: Path) -> Path:
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(case, tmp_path / "stacks" / f"Pulumi.{case.stem}.yaml")
    return tmp_path


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_are_feasible(stack: str) -> None:
    result = CliRunner().invoke(app, ["check", stack, "--root", str(ROOT)])
    assert result.exit_code == 0, result.output
    assert "feasible" in result.output


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_infeasible_stack_is_rejected_with_what_where_and_how_much(case: Path, tmp_path: Path) -> None:
    root = _project(case, tmp_path)
    expect = _expect(case)
    result = CliRunner().invoke(app, ["check", case.stem, "--root", str(root), "--json"])
    assert result.exit_code == 1, result.output
    found = json.loads(result.output)
    hit = [v for v in found if (v["rule"], v["where"]) == (expect["rule"], expect["where"])]
    assert hit, found
    assert expect["by"] in hit[0]["by"]
    table = CliRunner().invoke(app, ["check", case.stem, "--root", str(root)])
    assert table.exit_code == 1
    assert expect["rule"] in table.output


@pytest.mark.parametrize("case", CASES[:2], ids=[c.stem for c in CASES[:2]])
def test_synth_refuses_an_infeasible_stack_and_writes_nothing(case: Path, tmp_path: Path) -> None:
    root = _project(case, tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["synth", case.stem, "--root", str(root), "--out", str(out)])
    assert result.exit_code == 1
    assert not out.exists()
