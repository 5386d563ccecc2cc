"""A stack waives a rule by id with a reason: the waived violation refuses nothing (`check`, `synth`, the
Pulumi program) and `check` shows it with the reason; a waiver the registry cannot honour is refused when
the stack loads, in one line naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.program import read_environment
from grpo_infra.cli import app
from grpo_infra.pulumi_graph import GraphError, record_file
from tests.conftest import ROOT

ENV = "grpo-infra:environment"
# Slurm, 16 × 8 GPUs for a gang of 64 under a 48-GPU quota: breaks `tenant-quota` alone.
QUOTA_CASE = Path(__file__).parent / "infeasible" / "01-tenant-quota-below-gang.yaml"
REASON = "the site's scheduler enforces this tenant's quota per month, not per job"


def _stack(tmp_path: Path, source: Path, waive: list[dict[str, Any]], name: str = "site") -> Path:
    """A project holding `source` as stack `name`, with `checks.waive` set to `waive`."""
    document = yaml.safe_load(source.read_text())
    document["config"][ENV]["checks"] = {"waive": waive}
    (tmp_path / "stacks" / "locks").mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return tmp_path


def _check(root: Path, *flags: str, name: str = "site") -> Any:
    return CliRunner().invoke(app, ["check", name, "--root", str(root), *flags])


def test_a_waived_rule_passes_check_with_its_reason_shown(tmp_path: Path) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [{"rule": "tenant-quota", "reason": REASON}])
    result = _check(root)
    assert result.exit_code == 0, result.output
    assert "site: feasible (1 waived)" in result.output
    line = " ".join(result.output.split())
    assert "[tenant-quota]; reason: " + REASON in line
    assert "waived: grpo-infra:environment.tenants[0].gpuQuota: the gang needs 64 GPUs" in line


def test_json_lists_a_waived_violation_as_waived_with_its_reason(tmp_path: Path) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [{"rule": "tenant-quota", "reason": REASON}])
    result = _check(root, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [v for v in report if v["severity"] == "error"] == []
    (entry,) = [v for v in report if v["rule"] == "tenant-quota"]
    assert entry["severity"] == "waived"
    assert entry["reason"] == REASON
    assert entry["by"] == "16 GPUs"


def test_synth_writes_a_stack_whose_only_violation_is_waived(tmp_path: Path) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [{"rule": "tenant-quota", "reason": REASON}])
    out = tmp_path / "out"
    synth = CliRunner().invoke(app, ["synth", "site", "--root", str(root), "--out", str(out)])
    assert synth.exit_code == 0, synth.output
    assert (out / "site").is_dir()


def test_the_program_goes_ahead_with_a_stack_whose_only_violation_is_waived(tmp_path: Path) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [{"rule": "tenant-quota", "reason": REASON}])
    record_file("site", root / "stacks" / "Pulumi.site.yaml", _read_only)


def _read_only() -> None:
    """The program as `pulumi up` runs it, up to its feasibility check (what refuses an infeasible stack)."""
    read_environment()


def test_a_waiver_excuses_its_own_rule_only(tmp_path: Path) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [{"rule": "slurm-time-limit", "reason": REASON}])
    result = _check(root, "--json")
    assert result.exit_code == 1, result.output
    assert {v["rule"] for v in json.loads(result.stdout) if v["severity"] == "error"} == {"tenant-quota"}
    with pytest.raises(GraphError, match=r"\[tenant-quota\]"):
        record_file("site", root / "stacks" / "Pulumi.site.yaml", _read_only)


def test_a_waived_warning_is_shown_as_waived_not_warned(tmp_path: Path) -> None:
    root = _stack(
        tmp_path,
        ROOT / "stacks" / "Pulumi.local-slurm.yaml",
        [{"rule": "slurm-quota-unenforced", "reason": "one tenant: nobody to keep out"}],
    )
    result = _check(root)
    assert result.exit_code == 0, result.output
    assert "warning:" not in result.output
    assert "[slurm-quota-unenforced]; reason: one tenant: nobody to keep out" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("waiver", "message"),
    [
        (
            {"rule": "foo", "reason": REASON},
            f"{ENV}.checks.waive[0].rule: unknown rule 'foo' (see docs/check.md)",
        ),
        (
            {"rule": "image-lock-missing", "reason": REASON},
            f"{ENV}.checks.waive[0].rule: rule image-lock-missing cannot be waived: the build installs the lock",
        ),
        (
            {"rule": "gpu-pool-taint", "reason": REASON},
            "checks.waive[0].rule: gpu-pool-taint is a kubernetes rule; a slurm stack never breaks it",
        ),
        ({"rule": "tenant-quota", "reason": "  "}, f"{ENV}.checks.waive[0].reason: a waiver needs a reason"),
        ({"rule": "tenant-quota"}, f"{ENV}.checks.waive[0].reason: required, but missing"),
        (
            {"rule": "tenant-quota", "reason": "fine\n\x1b[2J"},
            f"{ENV}.checks.waive[0].reason: one line of text, without control characters",
        ),
        ({"rule": "tenant-quota", "reason": "x" * 201}, f"{ENV}.checks.waive[0].reason: string should have at most"),
    ],
    ids=["unknown", "unwaivable-lock", "off-target", "blank", "missing", "control", "long"],
)
def test_a_waiver_that_cannot_be_honoured_is_refused_in_one_line(
    waiver: dict[str, Any], message: str, tmp_path: Path
) -> None:
    root = _stack(tmp_path, QUOTA_CASE, [waiver])
    result = _check(root)
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert message in line, line
    assert " problems" not in line, "one problem, one line"


def test_a_rule_after_which_nothing_renders_cannot_be_waived(tmp_path: Path) -> None:
    """On a Kubernetes stack, where the rule applies: refused for what it is, not for its target."""
    waiver = {"rule": "raycronjob-schedule", "reason": REASON}
    result = _check(_stack(tmp_path, ROOT / "stacks" / "Pulumi.local-k8s.yaml", [waiver]))
    assert result.exit_code == 2, result.output
    assert (
        f"{ENV}.checks.waive[0].rule: rule raycronjob-schedule cannot be waived: nothing of the job's kind can be "
        "rendered without it" in " ".join(result.output.split())
    )


def test_a_rule_waived_twice_is_refused(tmp_path: Path) -> None:
    twice = [{"rule": "tenant-quota", "reason": REASON}, {"rule": "tenant-quota", "reason": "again"}]
    result = _check(_stack(tmp_path, QUOTA_CASE, twice))
    assert result.exit_code == 2, result.output
    assert "checks: waive[1].rule: tenant-quota is waived twice" in " ".join(result.output.split())
