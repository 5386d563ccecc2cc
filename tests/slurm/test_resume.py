"""A resumed run must advance, as the Kubernetes entrypoint checks it (`grpo_infra.lifecycle.resume`) and
as the sbatch does with the library's `checkpoint_step` (the sandbox test proves the sbatch end to end)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_infra.lifecycle import CHECKPOINT_TRACKER
from grpo_infra.lifecycle.resume import guarded
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from tests.slurm.shell import function
from tests.slurm.variants import stack


def _run(checkpoints: Path, *command: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "grpo_infra.lifecycle.resume", "--checkpoint-dir", str(checkpoints), "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _save(checkpoints: Path, step: int) -> str:
    return f"echo {step} > {checkpoints / CHECKPOINT_TRACKER}"


@pytest.mark.parametrize(
    ("before", "command", "status", "says"),
    [
        (2, "true", 1, "resumed at step 2 and exited 0 without saving a newer step (now 2): it did not train"),
        (2, "SAVE3", 0, None),  # resumed and stepped
        (None, "true", 0, None),  # a fresh run is never judged
        (2, "exit 5", 5, None),  # a failure stays the command's own
    ],
)
def test_a_resumed_run_that_exits_0_without_a_new_step_fails(
    tmp_path: Path, before: int | None, command: str, status: int, says: str | None
) -> None:
    if before is not None:
        (tmp_path / CHECKPOINT_TRACKER).write_text(f"{before}\n")
    script = _save(tmp_path, 3) if command == "SAVE3" else command
    proc = _run(tmp_path, "sh", "-c", script)
    assert proc.returncode == status, proc.stderr
    if says:
        assert proc.stderr.strip() == f"grpo: ERROR: the run {says}"
    else:
        assert proc.stderr == ""


def test_the_entrypoint_form_wraps_a_shell_command_line() -> None:
    assert guarded("/ckpt dir", "sh -c 'a && b'") == (
        "python3 -m grpo_infra.lifecycle.resume --checkpoint-dir '/ckpt dir' -- sh -c 'a && b'"
    )


def test_the_sbatch_reads_the_same_tracker(tmp_path: Path) -> None:
    script = render_files(stack("local-slurm"))[SBATCH_PATH]
    read = function(script, "checkpoint_step") + f"checkpoint_step {tmp_path}"
    assert subprocess.run(["bash", "-c", read], capture_output=True, text=True).stdout == "0\n"
    (tmp_path / CHECKPOINT_TRACKER).write_text("7\n")
    assert subprocess.run(["bash", "-c", read], capture_output=True, text=True).stdout == "7\n"
    assert '(( step_before > 0 )) && ! checkpoint_advanced "$step_before" "$step_after"' in script
    advanced = function(script, "checkpoint_advanced")
    for before, after, rc in ((5, 6, 0), (5, 5, 1), (5, 4, 1)):
        check = advanced + f"checkpoint_advanced {before} {after}"
        assert subprocess.run(["bash", "-c", check]).returncode == rc
