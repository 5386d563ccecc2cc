"""Slurm: `check` warns (never refuses) when the model, data or checkpoints are on no declared shared path."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from grpo_infra.check import violations, warnings
from grpo_infra.cli import app
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT


def _variant(change: Any) -> Environment:
    raw = load_stack("onprem-slurm", ROOT).environment.model_dump(by_alias=True, exclude_none=True)
    change(raw)
    return Environment.model_validate(raw)


def test_onprem_slurm_paths_map_through_the_mounts_onto_lustre() -> None:
    assert warnings(load_stack("onprem-slurm", ROOT).environment) == []


def test_an_undeclared_shared_path_warns_for_model_and_data_and_refuses_the_checkpoints() -> None:
    env = _variant(lambda raw: raw["slurm"].pop("sharedPaths"))
    found = warnings(env)
    # The model, one train file, one val file: each named with its host path, a warning only.
    assert [w.where.removeprefix("grpo-infra:environment.") for w in found] == [
        "job.modelPath",
        "job.data.trainFiles[0]",
        "job.data.valFiles[0]",
    ]
    assert "(on the nodes: /lustre/models/Qwen2.5-32B-Instruct)" in found[0].message
    # The checkpoint directory of the 8-node gang is refused: a requeued job could not resume from it.
    refused = violations(env)
    assert [(v.rule, v.where) for v in refused] == [("checkpoint-shared", "grpo-infra:environment.job.checkpoint.dir")]
    assert "on the nodes /lustre/checkpoints/qwen25-32b-dapo" in refused[0].message


def test_a_single_node_gang_only_warns_about_its_checkpoints() -> None:
    def one_node(raw: dict[str, Any]) -> None:
        raw["slurm"].pop("sharedPaths")
        raw["job"]["nodes"] = 1

    env = _variant(one_node)
    assert "job.checkpoint.dir" in [w.where.rsplit("environment.", 1)[-1] for w in warnings(env)]
    assert [v.rule for v in violations(env) if v.rule == "checkpoint-shared"] == []


def test_a_path_only_inside_the_image_warns() -> None:
    def unmounted(raw: dict[str, Any]) -> None:
        raw["job"]["modelPath"] = "/opt/models/Qwen2.5-32B-Instruct"

    found = warnings(_variant(unmounted))
    assert [(w.rule, w.where.rsplit(".", 1)[-1]) for w in found] == [("slurm-path-shared", "modelPath")]
    assert "inside the container image only" in found[0].message


def test_check_prints_the_warning_and_exits_zero(tmp_path) -> None:
    import shutil

    import yaml

    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.onprem-slurm.yaml").read_text())
    # Only the checkpoints declared shared: the model and data warn, nothing is refused.
    document["config"]["grpo-infra:environment"]["slurm"]["sharedPaths"] = ["/lustre/checkpoints"]
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks" / "Pulumi.onprem-slurm.yaml").write_text(yaml.safe_dump(document))
    shutil.copytree(ROOT / "stacks" / "locks", tmp_path / "stacks" / "locks")
    result = CliRunner().invoke(app, ["check", "onprem-slurm", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "[slurm-path-shared]" in result.output
    # --json: the same warnings on stderr, and in the JSON list with severity "warning" (no violation).
    as_json = CliRunner().invoke(app, ["check", "onprem-slurm", "--root", str(tmp_path), "--json"])
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert {v["severity"] for v in report} == {"warning"}
    assert "slurm-path-shared" in {v["rule"] for v in report}
    assert "warning:" in as_json.stderr and "[slurm-path-shared]" in as_json.stderr
