"""A worker node dies mid-run: Slurm requeues the job and the rerun resumes from the last checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from grpo_infra import sandbox
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox

STEPS = 8
STEP_SECONDS = 2.0
VICTIM = "node3"


def test_node_loss_requeues_and_resumes_without_losing_a_step(local_sandbox: Plan, workdir: Path) -> None:
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "requeue"
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={
            "GRPO_ENTRYPOINT": jobs.probe_command(checkpoints, steps=STEPS, step_seconds=STEP_SECONDS),
            "GRPO_RAY_READY_TIMEOUT": "150",
        },
        cwd=workdir,
    )
    jobs.wait_for_checkpoint(job, tracker)

    # The machine "dies": its slurmd, job step and Ray processes, all at once.
    killed = sandbox.kill_node(VICTIM)
    assert killed
    steps_before = int(tracker.read_text())
    assert steps_before < STEPS, "the run finished before the node was killed; raise STEPS"

    # Slurm notices the silent node, requeues the job (it keeps its id) and the node comes back.
    deadline = time.monotonic() + 120
    while int(jobs.job_info(job).get("Restarts", "0")) < 1:
        assert time.monotonic() < deadline, f"not requeued: {jobs.job_info(job)}"
        time.sleep(0.5)
    sandbox.start_node(VICTIM)

    state = jobs.wait_for_state(
        job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, timeout=240, poll=0.05
    )
    # Nothing of either run's Ray is left on any node (the first run's survivors on node1 and node2 included).
    left = jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}")
    output = jobs.output(job)
    assert state == "COMPLETED", output[-3000:]

    events = jobs.probe_events(output)
    resumed = [e for e in events if e["event"] == "resume"]
    assert len(resumed) == 1, output[-3000:]
    assert resumed[0]["restart_count"] == 1
    assert resumed[0]["from_step"] >= steps_before >= 1
    # Every step exists exactly once across the two runs: the rerun started right after the last saved one.
    saved = [e["step"] for e in events if e["event"] == "checkpoint"]
    assert sorted(saved) == list(range(1, STEPS + 1))
    assert sorted(int(p.name.removeprefix("global_step_")) for p in checkpoints.glob("global_step_*")) == list(
        range(1, STEPS + 1)
    )
    assert "requeued run 1" in output
    assert left == {}
