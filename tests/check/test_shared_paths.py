"""Slurm: `check` warns (never refuses) when the model, data or checkpoints are on no declared shared path."""

from __future__ import annotations

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


def test_an_undeclared_shared_path_warns_for_every_job_path_and_still_passes() -> None:
    env = _variant(lambda raw: raw["slurm"].pop("sharedPaths"))
    found = warnings(env)
    # The model, one train file, one val file, the checkpoint directory; each named with its host path.
    assert [w.where.removeprefix("grpo-infra:environment.") for w in found] == [
        "job.modelPath",
        "job.data.trainFiles[0]",
        "job.data.valFiles[0]",
        "job.checkpoint.dir",
    ]
    assert "(on the nodes: /lustre/models/Qwen2.5-32B-Instruct)" in found[0].message
    assert violations(env) == []


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
    document["config"]["grpo-infra:environment"]["slurm"].pop("sharedPaths")
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks" / "Pulumi.onprem-slurm.yaml").write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["check", "onprem-slurm", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "[slurm-path-shared]" in result.output
