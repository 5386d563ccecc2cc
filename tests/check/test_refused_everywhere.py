"""`check`, `synth` and the Pulumi program refuse the same stacks: every infeasible and every malformed case.

The program is run the way `pulumi up` runs it — on the stack file's config, with no validation by the
CLI first (`record_file`) — so each refusal here is the program's own.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.pulumi_graph import GraphError, record_file
from tests.conftest import ROOT

INFEASIBLE = sorted((Path(__file__).parent / "infeasible").glob("*.yaml"))
MALFORMED = sorted((ROOT / "tests" / "spec" / "malformed").glob("*.yaml"))
# Files the Pulumi CLI itself parses before any program runs: not YAML, a duplicate key, not a mapping,
# a key that is not a stack file's. The program only ever sees the config map of a file that parsed.
FILE_LEVEL = {"06-yaml-does-not-parse", "07-duplicate-key", "14-not-a-stack-file", "15-unknown-top-level"}
# An empty file reaches the program as no config at all.
PROGRAM_MESSAGE = {"31-empty-file": "config has no `grpo-infra:environment` key"}
# The cloud provider SDK a case's program needs beyond the base install.
PROVIDER_SDK = {"eks": "pulumi_aws", "gke": "pulumi_gcp"}


def _header(case: Path) -> dict[str, str]:
    lines = case.read_text().splitlines()
    """`# expect-rule: x` → {"rule": "x"}; a bare `# expect: x` (malformed cases) → {"message": "x"}."""
    out = {}
    for line in lines:
        if line.startswith("# expect"):
            key, value = line.removeprefix("# expect").split(":", 1)
            out[key.lstrip("-") or "message"] = value.strip()
    return out


def _project(case: Path, tmp_path: Path) -> Path:
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(case, tmp_path / "stacks" / f"Pulumi.{case.stem}.yaml")
    return tmp_path


def _needs_sdk(case: Path) -> None:
    text = case.read_text()
    for provider, module in PROVIDER_SDK.items():
        if f"provider: {provider}" in text and importlib.util.find_spec(module) is None:
            pytest.skip(f"{case.stem}: the program needs {module}")


@pytest.mark.parametrize("case", INFEASIBLE, ids=[c.stem for c in INFEASIBLE])
def test_infeasible_stack_is_refused_by_check_synth_and_the_program(case: Path, tmp_path: Path) -> None:
    expect = _header(case)
    root = _project(case, tmp_path)
    runner = CliRunner()

    check = runner.invoke(app, ["check", case.stem, "--root", str(root), "--json"])
    assert check.exit_code == 1, check.output
    rules = {v["rule"] for v in json.loads(check.stdout) if v["severity"] == "error"}
    assert expect["rule"] in rules

    out = tmp_path / "out"
    synth = runner.invoke(app, ["synth", case.stem, "--root", str(root), "--out", str(out)])
    assert synth.exit_code == 1, synth.output
    assert expect["rule"] in synth.output
    assert not out.exists(), "an infeasible stack must not be written"

    _needs_sdk(case)
    with pytest.raises(GraphError) as refused:
        record_file(case.stem, root / "stacks" / f"Pulumi.{case.stem}.yaml")
    message = str(refused.value)
    assert "the gang is infeasible; nothing applied" in message
    assert f"[{expect['rule']}]" in message
    assert expect["where"] in message


def test_the_file_level_cases_exist() -> None:
    """A renamed case must not silently drop out of the program's half of the test below."""
    assert {c.stem for c in MALFORMED} >= FILE_LEVEL


@pytest.mark.parametrize("case", MALFORMED, ids=[c.stem for c in MALFORMED])
def test_malformed_stack_is_refused_by_check_synth_and_the_program(case: Path, tmp_path: Path) -> None:
    expect = _header(case)
    root = _project(case, tmp_path)
    runner = CliRunner()
    fragment = " ".join(expect["message"].split())

    for command in (["check", case.stem], ["synth", case.stem, "--out", str(tmp_path / "out")]):
        result = runner.invoke(app, [*command, "--root", str(root)])
        assert result.exit_code == 2, (command, result.output)
        assert fragment in " ".join(result.output.split()), (command, result.output)
    assert not (tmp_path / "out").exists()

    if case.stem in FILE_LEVEL:
        return
    _needs_sdk(case)
    with pytest.raises(GraphError) as refused:
        record_file(case.stem, root / "stacks" / f"Pulumi.{case.stem}.yaml")
    message = " ".join(str(refused.value).split())
    assert f"stacks/Pulumi.{case.stem}.yaml" in message
    assert expect["path"] in message
    assert PROGRAM_MESSAGE.get(case.stem, fragment) in message
