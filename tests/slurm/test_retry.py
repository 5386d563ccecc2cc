"""The crash retry budget (slurm.retries): the rendered sbatch's requeue_after_crash, run in bash with a
fake `scontrol` on PATH that records what the job asked Slurm."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from grpo_infra.slurmgen import SBATCH_PATH, render_files
from tests.slurm.shell import functions
from tests.slurm.variants import stack, variant


def _script(retries: int | None = None) -> str:
    env = (
        stack("local-slurm")
        if retries is None
        else variant("local-slurm", lambda d: d["slurm"].update(retries=retries))
    )
    return render_files(env)[SBATCH_PATH]


def _crash(tmp_path: Path, script: str, before: int, after: int) -> tuple[str, str]:
    """One failed run: the job's log lines and what scontrol was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    fake.chmod(0o755)
    body = functions(script, "log", "checkpoint_advanced", "requeue_after_crash")
    body += 'stop_job_ray() { :; }\nrequeue_after_crash 1 "$1" "$2"\necho "outcome=$outcome"\n'
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NAME": "grpo",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "GRPO_CHECKPOINT_DIR": "/ckpt",
    }
    proc = subprocess.run(["bash", "-c", body, "x", str(before), str(after)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    calls = tmp_path / "scontrol.calls"
    asked = calls.read_text() if calls.exists() else ""
    calls.unlink(missing_ok=True)
    return proc.stderr + proc.stdout, asked


def test_crashes_without_progress_spend_the_budget_then_stop(tmp_path: Path) -> None:
    script = _script(2)
    for attempt in (1, 2):
        said, asked = _crash(tmp_path, script, 5, 5)
        assert (
            f"requeueing after a crash (status 1, restart 0): attempt {attempt} of 2, checkpoint still at step 5"
            in said
        )
        assert asked == "requeue 42\n"
        assert "outcome=requeued after a crash" in said
    said, asked = _crash(tmp_path, script, 5, 5)
    assert "retry budget spent: 2 of 2 requeues" in said
    assert asked == ""
    assert "outcome=FAILED: the training command exited with status 1" in said


def test_a_crash_after_a_newer_checkpoint_is_not_counted(tmp_path: Path) -> None:
    script = _script(1)
    _crash(tmp_path, script, 5, 5)  # spends the one retry
    said, asked = _crash(tmp_path, script, 5, 9)
    assert "attempt 0 of 1, checkpoint advanced from 5 to 9, not counted" in said
    assert asked == "requeue 42\n"
    said, asked = _crash(tmp_path, script, 9, 9)  # the budget is whole again
    assert "attempt 1 of 1" in said and asked == "requeue 42\n"


@pytest.mark.parametrize("before,after", [(0, 0), (3, 7)])
def test_no_budget_never_requeues(tmp_path: Path, before: int, after: int) -> None:
    said, asked = _crash(tmp_path, _script(0), before, after)
    assert "retry budget spent" in said and asked == ""


def test_the_default_budget_is_small_and_the_driver_failure_uses_it() -> None:
    script = _script()
    assert "budget=3 " in script
    assert 'requeue_after_crash "$status" "$step_before" "$step_after"' in script
