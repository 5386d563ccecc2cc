"""A stop signal Slurm replays from an earlier run of the same job id leaves a running job whole.

slurmctld resends a signal to a node that did not answer it once the node answers again (agent retry), and a
requeued job keeps its job and step ids: an earlier run's `scancel --signal=INT` can reach the rerun's Ray.
Here the replay is staged exactly as it arrives, INT to every step of the running job, not from its script.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.cluster import slurm_env
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox

STEPS = 6
STEP_SECONDS = 2.0


def test_a_replayed_int_is_named_and_ignored_and_the_run_completes(local_sandbox: Plan, workdir: Path) -> None:
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "replayed"
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={"GRPO_ENTRYPOINT": jobs.probe_command(checkpoints, steps=STEPS, step_seconds=STEP_SECONDS)},
        cwd=workdir,
    )
    jobs.wait_for_checkpoint(job, tracker)
    assert int(tracker.read_text()) < STEPS, "the run finished before the signal; raise STEPS"

    replay = subprocess.run(
        ["scancel", "--signal=INT", str(job)], env=slurm_env(local_sandbox.root), capture_output=True, text=True
    )
    assert replay.returncode == 0, replay.stderr

    state = jobs.wait_for_state(job, jobs.FINAL_STATES, timeout=180)
    output = jobs.output(job)
    assert state == "COMPLETED", output[-3000:]
    # Every node named the signal it ignored; none of them lost its Ray, so every step ran once, in this run.
    ignored = sorted(
        line.split("] ", 1)[1].split(" ", 3)[2] for line in output.splitlines() if "a signal Slurm replayed" in line
    )
    assert ignored == [node.name for node in local_sandbox.nodes], output[-3000:]
    assert "stopped by itself" not in output
    saved = [e["step"] for e in jobs.probe_events(output) if e["event"] == "checkpoint"]
    assert saved == list(range(1, STEPS + 1)), output[-3000:]
    assert jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}") == {}
