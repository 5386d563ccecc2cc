"""The command line as a new user meets it: any working directory, `--root`, bad output paths, `--help`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from tests.conftest import ROOT


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed entry point as a shell runs it, from `cwd` (the project importable, not the cwd)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "grpo_infra.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_commands_find_the_project_from_a_subdirectory() -> None:
    # Like Pulumi: the nearest Pulumi.yaml at or above the working directory, then its stackConfigDir.
    proc = _cli("stacks", cwd=ROOT / "grpo_infra" / "spec")
    assert proc.returncode == 0, proc.stderr
    assert "local-slurm" in proc.stdout and "onprem-slurm" in proc.stdout


@pytest.mark.parametrize("args", [["stacks"], ["sandbox", "up"], ["synth", "local-slurm"], ["check", "eks-prod"]])
def test_outside_any_project_every_command_says_so_in_one_line(args: list[str], tmp_path: Path) -> None:
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: no Pulumi project (Pulumi.yaml) in {tmp_path.resolve()} or above it: run inside a grpo-infra "
        "checkout or pass --root DIR"
    ]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_root_works_from_anywhere(tmp_path: Path) -> None:
    proc = _cli("stacks", "--root", str(ROOT), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "eks-prod" in proc.stdout


def test_a_project_without_stacks_or_with_another_stack_dir_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    empty = _cli("stacks", cwd=tmp_path / "stacks")
    assert empty.returncode == 2
    assert (
        empty.stderr.strip()
        == f"error: no stacks in {tmp_path.resolve()}/stacks (stack files are named Pulumi.<stack>.yaml)"
    )
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: config\n")
    other = _cli("stacks", cwd=tmp_path)
    assert other.returncode == 2
    assert "stackConfigDir is 'config'; grpo-infra reads the stacks from stacks/" in other.stderr


@pytest.mark.parametrize(
    ("out", "cause"),
    [
        ("a-file", "{tmp}/a-file is a file, not a directory"),
        ("a-file/deeper", "{tmp}/a-file is a file, not a directory"),
        (
            "/proc/grpo-x",
            "/proc does not take new files (No such file or directory): a read-only or virtual file system",
        ),
    ],
)
def test_an_unwritable_out_names_the_real_cause(out: str, cause: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    target = out if out.startswith("/") else str(tmp_path / out)
    result = CliRunner().invoke(app, ["synth", "local-slurm", "--root", str(ROOT), "--out", target])
    assert result.exit_code == 2
    assert result.output.replace("\n", "") == f"error: cannot write {target}/local-slurm: {cause.format(tmp=tmp_path)}"


def test_help_shows_no_value_type_after_flags() -> None:
    text = CliRunner().invoke(app, ["check", "--help"], env={"COLUMNS": "200"}).output
    assert "<bool>" not in text
    flag = next(line for line in text.splitlines() if "--json" in line)
    assert flag.split("--json", 1)[1].split()[0] == "Print"  # straight to its help, no `<type>`
    assert "<path>" in next(line for line in text.splitlines() if "--root" in line)  # options with values keep it


def test_up_wait_on_a_stack_that_runs_no_rayjob_is_one_line_before_the_engine(tmp_path: Path) -> None:
    """`up --wait` follows a RayJob; on a raycluster stack it refuses in one line and creates nothing."""
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stack_file = tmp_path / "stacks" / "Pulumi.local-k8s.yaml"
    stack_file.write_text(
        stack_file.read_text().replace(
            "      name: grpo-qwen25-05b\n", "      name: grpo-qwen25-05b\n      kind: raycluster\n"
        )
    )
    proc = _cli("up", "local-k8s", "--wait", "--root", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        'error: --wait follows a RayJob; stack local-k8s runs a raycluster (docs/kubernetes.md, "Which kind")'
    ]
