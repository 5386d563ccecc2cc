"""`diff`: what a reviewer reads before `pulumi up` — rendered from the working tree and from a git ref."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from grpo_infra.cli import app
from tests.conftest import ROOT


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _project(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("Pulumi.yaml", "grpo_infra", "stacks", "slurm"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy(src, repo / item)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    return repo


def test_diff_shows_a_tenant_added_since_the_ref(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    stack = repo / "stacks" / "Pulumi.onprem-k8s.yaml"
    stack.write_text(
        stack.read_text().replace(
            "      - {name: eval-team, queue: eval-team, gpuQuota: 8}\n",
            "      - {name: eval-team, queue: eval-team, gpuQuota: 4}\n      - {name: safety, queue: safety, gpuQuota: 4}\n",
        )
    )
    result = CliRunner().invoke(app, ["diff", "onprem-k8s", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    assert "added" in result.output
    assert "+++ b/kubernetes/namespace.safety.yaml" in result.output
    assert "+  name: safety" in result.output


def test_diff_of_an_unchanged_stack_is_empty(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    result = CliRunner().invoke(app, ["diff", "eks-prod", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    assert "0 added, 0 changed, 0 removed" in result.output
    assert "+++" not in result.output


def test_diff_against_a_missing_ref_is_bad_input(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    result = CliRunner().invoke(app, ["diff", "eks-prod", "--root", str(repo), "--against", "no-such-ref"])
    assert result.exit_code == 2
    assert "cannot read git ref 'no-such-ref'" in result.output


def test_diff_of_a_stack_new_since_the_ref_adds_every_file(tmp_path: Path) -> None:
    """docs/review.md: a stack that does not exist at the ref shows every rendered file as added."""
    repo = _project(tmp_path)
    shutil.copy(repo / "stacks" / "Pulumi.local-slurm.yaml", repo / "stacks" / "Pulumi.second-sandbox.yaml")
    synth = CliRunner().invoke(app, ["synth", "second-sandbox", "--root", str(repo), "--out", str(tmp_path / "o")])
    assert synth.exit_code == 0, synth.output
    tree = tmp_path / "o" / "second-sandbox"
    written = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    assert written, "synth wrote nothing"

    result = CliRunner().invoke(app, ["diff", "second-sandbox", "--root", str(repo)])
    assert result.exit_code == 0, result.output
    assert f"{len(written)} added, 0 changed, 0 removed" in result.output
    for path in written:
        assert f"--- /dev/null\n+++ b/{path}\n" in result.output
    assert "--- a/" not in result.output


def test_a_ref_that_looks_like_an_option_is_refused_and_truncates_nothing(tmp_path: Path) -> None:
    """`--against=--output=FILE` once reached `git archive` as its option and emptied FILE."""
    repo = _project(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("kept\n")
    result = CliRunner().invoke(app, ["diff", "eks-prod", "--root", str(repo), f"--against=--output={precious}"])
    assert result.exit_code == 2, result.output
    assert precious.read_text() == "kept\n"
    assert "may not start with `-`" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_ref_git_would_read_as_a_listing_option_is_one_line_of_bad_input(tmp_path: Path) -> None:
    repo = _project(tmp_path)
    result = CliRunner().invoke(app, ["diff", "eks-prod", "--root", str(repo), "--against=--list"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert len(result.output.strip().splitlines()) == 1
