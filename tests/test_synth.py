"""`synth`: every shipped stack renders, deterministically, with no plaintext secret anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.leaks import carries
from grpo_infra.spec import load_stack
from tests.conftest import ROOT, SHIPPED_STACKS

REQUIRED_STACKS = {"eks-prod", "gke-dev", "onprem-k8s", "onprem-slurm", "local-slurm"}


def _tree(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()}


def test_the_promised_stacks_ship() -> None:
    assert set(SHIPPED_STACKS) >= REQUIRED_STACKS


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_synth_twice_gives_identical_trees(stack: str, tmp_path: Path) -> None:
    runner = CliRunner()
    for out in ("a", "b"):
        result = runner.invoke(app, ["synth", stack, "--root", str(ROOT), "--out", str(tmp_path / out)])
        assert result.exit_code == 0, result.output
    first, second = _tree(tmp_path / "a" / stack), _tree(tmp_path / "b" / stack)
    assert first, "synth wrote nothing"
    assert first == second


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_synth_output_holds_no_secret_ciphertext_or_plaintext(stack: str, tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    secure = [v["secure"] for v in config.values() if isinstance(v, dict) and "secure" in v]
    result = CliRunner().invoke(app, ["synth", stack, "--root", str(ROOT), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    blob = b"".join(_tree(tmp_path / stack).values()).decode()
    for value in secure:
        assert not carries(blob, value)
        assert not carries(blob, value.split(":")[-1])


def test_synth_replaces_stale_files(tmp_path: Path) -> None:
    stale = tmp_path / "eks-prod" / "kubernetes" / "removed-object.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("kind: Gone\n")
    result = CliRunner().invoke(app, ["synth", "eks-prod", "--root", str(ROOT), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not stale.exists()


def test_stacks_lists_every_stack_with_its_size() -> None:
    result = CliRunner().invoke(app, ["stacks", "--root", str(ROOT)])
    assert result.exit_code == 0, result.output
    for stack in SHIPPED_STACKS:
        env = load_stack(stack, ROOT).environment
        assert stack in result.output
        assert f"{env.gang.nodes} × {env.gang.gpus_per_node} GPU" in result.output


def test_derived_sizes_of_shipped_stacks() -> None:
    """Sizes come from pools: a hostlist's length, or a node count; the gang defaults to the pool."""
    slurm = load_stack("onprem-slurm", ROOT).environment
    assert slurm.pools[0].node_count == 16  # gpu[001-016]
    assert slurm.gang.nodes == 8 and slurm.gang.world_size == 64
    eks = load_stack("eks-prod", ROOT).environment
    assert eks.gang.nodes == eks.pools[0].nodes == 4
    assert eks.gang.world_size == 32


def test_an_unwritable_output_directory_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(app, ["synth", "local-slurm", "--root", str(ROOT), "--out", str(blocker)])
    assert result.exit_code == 2
    assert "cannot write" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_root_without_stacks_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["stacks", "--root", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "not a grpo-infra project" in result.output


def test_brackets_in_a_bad_stack_are_shown_as_typed(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    text = (ROOT / "stacks" / "Pulumi.local-slurm.yaml").read_text()
    (tmp_path / "stacks" / "Pulumi.odd.yaml").write_text(
        text.replace("      interface: eth0\n", "      '[/x]': eth0\n")
    )
    result = CliRunner().invoke(app, ["stacks", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "[/x]" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
