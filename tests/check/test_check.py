"""`check` refuses infeasible stacks with a table of what, where and by how much.

That `synth` and the Pulumi program refuse the same stacks is tested in `test_refused_everywhere.py`.
"""

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
    """The case's header: `# expect-rule:`, `-where:`, `-by:` and, when one edit breaks two rules, `-also:`."""
    head = [line for line in case.read_text().splitlines() if line.startswith("# expect-")]
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
    found = [v for v in json.loads(result.stdout) if v["severity"] == "error"]  # warnings are listed too
    # Each case breaks exactly the rules it names: a case that also broke another rule would stay red
    # when its own rule stopped firing.
    assert {v["rule"] for v in found} == {expect["rule"], *expect.get("also", "").split()} - {""}, found
    hit = [v for v in found if (v["rule"], v["where"]) == (expect["rule"], expect["where"])]
    assert hit, found
    if expect["by"]:
        assert expect["by"] in hit[0]["by"]
    else:
        assert hit[0]["by"] == "", "a rule with no amount must not invent one"
    table = CliRunner().invoke(app, ["check", case.stem, "--root", str(root)])
    assert table.exit_code == 1
    assert expect["rule"] in table.output
