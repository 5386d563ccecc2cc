"""A crash with every node up, on real slurmctld/slurmd: the sbatch's retry budget (`slurm.retries`) requeues
the job with `scontrol requeue`, a crash after a newer checkpoint costs nothing, one without costs an attempt,
and the rerun resumes from the last checkpoint and completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox

STEPS = 4


def test_a_crash_is_requeued_by_the_budget_and_the_rerun_resumes_and_completes(
    local_sandbox: Plan, workdir: Path
) -> None:
    # The job's own checkpoint directory: the one the sbatch reads before and after the training command.
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir)
    assert not (checkpoints / "latest_checkpointed_iteration.txt").exists(), "a fresh sandbox has no checkpoint"
    # Run 0 saves steps 1-2, then crashes (the checkpoint advanced: not counted); run 1 crashes at once
    # (no progress: attempt 1 of the budget); run 2 resumes from step 2 and finishes.
    first, last = jobs.probe_command(checkpoints, steps=2), jobs.probe_command(checkpoints, steps=STEPS)
    entrypoint = (
        f'case "$GRPO_RESTART_COUNT" in 0) {first} && exit 3 ;; 1) echo "crash without a step" >&2; exit 3 ;; '
        f"*) {last} ;; esac"
    )
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={"GRPO_ENTRYPOINT": entrypoint, "GRPO_RAY_READY_TIMEOUT": "150"},
        cwd=workdir,
    )
    state = jobs.wait_for_state(job, set(jobs.FINAL_STATES), timeout=600, poll=0.2)
    output = jobs.output(job)
    assert state == "COMPLETED", output[-3000:]
    assert jobs.job_info(job).get("Restarts") == "2", jobs.job_info(job)
    assert "attempt 0 of 3, checkpoint advanced from 0 to 2, not counted" in output, output[-3000:]
    assert "attempt 1 of 3, checkpoint still at step 2" in output, output[-3000:]
    events = jobs.probe_events(output)
    resumed = [e for e in events if e["event"] == "resume"]
    assert [(e["from_step"], e["restart_count"]) for e in resumed] == [(2, 2)], output[-3000:]
    assert sorted(e["step"] for e in events if e["event"] == "checkpoint") == list(range(1, STEPS + 1))
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
