"""pulumi-aws and pulumi-gcp are optional: only the stacks that use them need them."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.pulumi_graph import GraphError, record

from .conftest import ROOT


@pytest.fixture
def base_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if only the base package were installed: importing either cloud SDK fails."""
    for module in list(sys.modules):
        if module.split(".")[0] in ("pulumi_aws", "pulumi_gcp"):
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "pulumi_aws", None)
    monkeypatch.setitem(sys.modules, "pulumi_gcp", None)


@pytest.mark.parametrize(
    ("stack", "line"),
    [
        ("eks-prod", "stack eks-prod needs pulumi-aws, which is not installed: pip install -e '.[aws]'"),
        ("gke-dev", "stack gke-dev needs pulumi-gcp, which is not installed: pip install -e '.[gcp]'"),
    ],
)
def test_a_stack_needing_a_missing_extra_names_it_in_one_line(base_install: None, stack: str, line: str) -> None:
    with pytest.raises(GraphError) as raised:
        record(stack, ROOT)
    assert str(raised.value) == line

    result = CliRunner().invoke(app, ["graph", stack, "--root", str(ROOT)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {line}"


@pytest.mark.parametrize("stack", ["onprem-k8s", "local-slurm", "onprem-slurm"])
def test_stacks_without_a_cloud_provider_need_no_extra(base_install: None, stack: str, tmp_path) -> None:
    graph = record(stack, ROOT)
    assert not [r for r in graph.resources if r.type.startswith(("aws:", "gcp:"))]
    runner = CliRunner()
    assert runner.invoke(app, ["graph", stack, "--root", str(ROOT), "--json"]).exit_code == 0
    assert runner.invoke(app, ["synth", stack, "--root", str(ROOT), "--out", str(tmp_path)]).exit_code == 0
    assert "pulumi_aws" not in sys.modules or sys.modules["pulumi_aws"] is None
