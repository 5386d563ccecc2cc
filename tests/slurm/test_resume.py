"""The resume rule's program (`grpo_infra/lifecycle/resume.py`) run as a lone file, as every image runs it: a
resumed run must advance (as the sbatch also checks with the library's `checkpoint_step`; the sandbox test
proves the sbatch end to end), and the sbatch refuses a checkpoint directory of another experiment."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import training
from grpo_infra.lifecycle.ray_node import RESUME_PROGRAM
from grpo_infra.lifecycle.resume import CHECKPOINT_TRACKER, FINISHED_FILE, IDENTITY_FILE, guarded
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from tests.slurm.shell import function
from tests.slurm.variants import stack

IDENTITY = {"digest": "0123456789abcdef", "job": "grpo", "fields": {"actor_rollout_ref.actor.optim.lr": 1e-6}}


def _run(checkpoints: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """The program as a lone file (no grpo_infra importable), with an identity this directory already holds."""
    argv = [sys.executable, "-I", str(RESUME_PROGRAM), "--checkpoint-dir", str(checkpoints)]
    (checkpoints / IDENTITY_FILE).write_text(json.dumps(IDENTITY))
    return subprocess.run([*argv, "--identity", json.dumps(IDENTITY), "--", *command], capture_output=True, text=True)


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
    assert guarded("/ckpt dir", "sh -c 'a && b'", identity_file="/id.json", program="/opt/r.py") == (
        "python3 /opt/r.py --checkpoint-dir '/ckpt dir' --identity-file /id.json -- sh -c 'a && b'"
    )
    assert guarded("/c", "true", identity='{"digest": "d"}') == (
        """python3 -m grpo_infra.lifecycle.resume --checkpoint-dir /c --identity '{"digest": "d"}' -- true"""
    )


def test_the_sbatch_reads_the_same_tracker(tmp_path: Path) -> None:
    script = render_files(stack("local-slurm"))[SBATCH_PATH]
    read = function(script, "checkpoint_step") + f"checkpoint_step {tmp_path}"
    assert subprocess.run(["bash", "-c", read], capture_output=True, text=True).stdout == "0\n"
    (tmp_path / CHECKPOINT_TRACKER).write_text("7\n")
    assert subprocess.run(["bash", "-c", read], capture_output=True, text=True).stdout == "7\n"
    assert '--checkpoint-dir "$GRPO_CHECKPOINT_DIR" --judge "$step_before"' in script
    advanced = function(script, "checkpoint_advanced")
    for before, after, rc in ((5, 6, 0), (5, 5, 1), (5, 4, 1)):
        check = advanced + f"checkpoint_advanced {before} {after}"
        assert subprocess.run(["bash", "-c", check]).returncode == rc


def _sbatch_identity_check(script: str, checkpoints: Path) -> str:
    """The sbatch's library `resume_program` and its identity step, with `on_head` running in place."""
    program = re.search(r"^resume_program=\$\(cat <<'PYTHON'\n.*?^PYTHON\n\)\n", script, re.M | re.S)
    step = re.search(r'^ *on_head python3 -c "\$resume_program" .*\n.*\n', script, re.M)  # a step of `main`
    assert program and step, "the sbatch has no resume identity step"
    return (
        f'on_head() {{ "$@"; }}\nfail() {{ echo "FAIL $*" >&2; exit 1; }}\nGRPO_CHECKPOINT_DIR={checkpoints}\n'
        + program.group(0)
        + step.group(0)
        + "echo passed\n"
    )


def _local_slurm(learning_rate: float | None = None) -> Any:
    env = stack("local-slurm")
    if learning_rate is None:
        return env
    return env.model_copy(update={"job": env.job.model_copy(update={"learning_rate": learning_rate})})


def test_the_sbatch_refuses_another_experiments_checkpoint_dir_and_resumes_its_own(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    first, second = _local_slurm(), _local_slurm(learning_rate=7e-6)
    assert first.job.name == second.job.name
    fresh = subprocess.run(["bash", "-c", _sbatch_identity_check(render_files(first)[SBATCH_PATH], checkpoints)])
    assert fresh.returncode == 0
    assert json.loads((checkpoints / IDENTITY_FILE).read_text()) == training.experiment_identity(first)
    (checkpoints / CHECKPOINT_TRACKER).write_text("20")
    again = subprocess.run(
        ["bash", "-c", _sbatch_identity_check(render_files(first)[SBATCH_PATH], checkpoints)],
        capture_output=True,
        text=True,
    )
    assert (again.returncode, again.stdout, again.stderr) == (0, "passed\n", "")
    other = subprocess.run(
        ["bash", "-c", _sbatch_identity_check(render_files(second)[SBATCH_PATH], checkpoints)],
        capture_output=True,
        text=True,
    )
    assert other.returncode == 1 and "passed" not in other.stdout
    refusal, failed = other.stderr.splitlines()
    assert refusal.startswith(f"grpo: ERROR: checkpoint dir {checkpoints} belongs to experiment ")
    assert f"(actor_rollout_ref.actor.optim.lr: {first.job.learning_rate} → 7e-06)" in refusal
    assert refusal.endswith("set a new job.name for a new experiment, or remove the directory to start this one over")
    assert failed.startswith("FAIL the checkpoint directory")


def test_the_sbatch_form_judges_a_run_it_ran_itself(tmp_path: Path) -> None:
    """`--judge STEP`: the sbatch runs verl itself (its crash path requeues) and asks the program after an exit 0."""

    def judge(before: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-I", str(RESUME_PROGRAM), "--checkpoint-dir", str(tmp_path), "--judge", str(before)]
        return subprocess.run(argv, capture_output=True, text=True)

    (tmp_path / CHECKPOINT_TRACKER).write_text("2\n")
    refused = judge(2)  # resumed at 2, saved nothing, and no run of the experiment ended at 2
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith("it did not train")
    trained = judge(0)  # a fresh run that saved up to step 2 and exited 0: recorded as finished
    assert (trained.returncode, trained.stderr) == (0, "")
    assert (tmp_path / FINISHED_FILE).read_text() == "2\n"
    done = judge(2)  # the same experiment again, nothing left
    assert done.returncode == 0
    assert done.stderr.strip() == "grpo: the experiment finished at step 2 in an earlier run; nothing was left to train"
