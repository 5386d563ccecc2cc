"""Promises of the lifecycle on real daemons: every port a running job's Ray listens on lies inside the
job's port block (the dashboard's API server included), a resumed run that exits 0 without a new
training step FAILS instead of COMPLETING, and a head whose raylet registers late on a loaded machine is
started again, its workers following it, instead of failing the job (grpo_infra/lifecycle, docs/slurm.md)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_infra.lifecycle.resume import FINISHED_FILE
from grpo_infra.ports import ray_ports
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.cluster import which
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox


def _listening(namespace: str) -> dict[int, set[int]]:
    """pid -> the TCP ports it listens on, in one node's network namespace (`ss -ltnp`)."""
    out = subprocess.run(
        [which("nsenter") or "nsenter", f"--net=/run/netns/{namespace}", "ss", "-Hltnp"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found: dict[int, set[int]] = {}
    for line in out.splitlines():
        port = int(line.split()[3].rsplit(":", 1)[1])
        for pid in re.findall(r"pid=(\d+)", line):
            found.setdefault(int(pid), set()).add(port)
    return found


def test_every_port_a_running_jobs_ray_listens_on_is_in_its_block(local_sandbox: Plan, workdir: Path) -> None:
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "ports"
    entrypoint = jobs.probe_command(checkpoints, steps=3, step_seconds=4.0)
    job = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": entrypoint}, cwd=workdir)
    deadline = time.monotonic() + 240
    while "training launched" not in jobs.output(job):
        assert time.monotonic() < deadline, jobs.output(job)[-3000:]
        assert jobs.job_state(job) not in jobs.FINAL_STATES, jobs.output(job)[-3000:]
        time.sleep(0.2)
    time.sleep(3)  # the probe's tasks run: the workers Ray started for them listen too
    block = re.search(r"Ray ports (\d+)-(\d+) ", jobs.output(job))
    assert block is not None
    low, high = int(block[1]), int(block[2])
    ray = jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}")
    outside, seen = [], 0
    for node in local_sandbox.nodes:
        for pid, ports in _listening(node.namespace).items():
            if pid not in ray:
                continue
            seen += len(ports)
            outside += [(node.name, port, ray[pid][:80]) for port in sorted(ports) if not low <= port <= high]
    assert jobs.wait_for_state(job, timeout=180) == "COMPLETED", jobs.output(job)[-3000:]
    assert seen >= 3 * 5, "too few listening sockets seen to judge"  # raylet, object manager, agents, ...
    assert outside == [], f"ports outside the job's block {low}-{high}: {outside}"


def _probe(steps: int) -> str:
    """The probe training to `steps` in the job's own checkpoint directory (where the sbatch looks)."""
    probe = [sys.executable, "-m", "grpo_infra.probe", "--steps", str(steps)]
    return shlex.join(probe) + ' --checkpoint-dir "$GRPO_CHECKPOINT_DIR"'


def test_a_resumed_run_that_exits_0_without_a_new_step_fails_unless_the_experiment_had_finished(
    local_sandbox: Plan, workdir: Path
) -> None:
    first = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": _probe(2)}, cwd=workdir)
    assert jobs.wait_for_state(first, timeout=240) == "COMPLETED", jobs.output(first)[-3000:]
    # The same run again (a requeue after the last step): it resumes at step 2 of 2, where the first run
    # exited 0, and has nothing left to train.
    done = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": _probe(2)}, cwd=workdir)
    assert jobs.wait_for_state(done, timeout=240) == "COMPLETED", jobs.output(done)[-3000:]
    assert "the experiment finished at step 2 in an earlier run; nothing was left to train" in jobs.output(done)
    # A run that saved step 2 and died before exiting 0 leaves no record of it: the next run resumes at step 2
    # and exits 0 having trained nothing, as verl did at an epoch boundary.
    (Path(local_sandbox.env.job.checkpoint.dir) / FINISHED_FILE).unlink()
    again = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": _probe(2)}, cwd=workdir)
    state = jobs.wait_for_state(again, timeout=240)
    output = jobs.output(again)
    assert state == "FAILED", output[-3000:]
    assert "training command exited with status 0" in output
    assert (
        "ERROR: the run resumed at step 2 and exited 0 without saving a newer step (now 2): it did not train"
    ) in output, output[-3000:]
    assert output.rstrip().endswith("outcome: FAILED: the run resumed at step 2 and exited 0 without saving a "
                                    "newer step (now 2): it did not train")  # fmt: skip
    # One more step to go: the resumed run advances and COMPLETES.
    third = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": _probe(3)}, cwd=workdir)
    assert jobs.wait_for_state(third, timeout=240) == "COMPLETED", jobs.output(third)[-3000:]


# Longer than Ray's own wait for a starting node's raylet to register (30 s, ray/_private/node.py, Ray 2.60).
HEAD_STALL_S = 35.0


def gcs_port(plan: Plan, job: int) -> int:
    """The GCS port of `job`'s port block, by the stack's rule (its range, its pool's block size)."""
    assert plan.env.slurm is not None
    ports = plan.env.slurm.ray_ports
    return ray_ports(ports.start, ports.end, job, plan.env.gang.pool.ray_block_size).gcs


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _head_start(temp_dir: Path, timeout: float) -> int:
    """The pid of the head's `ray start` whose temp dir is `temp_dir`, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            command = _cmdline(int(entry)) if entry.isdigit() else ""
            if " start " in command and "--head" in command and f"--temp-dir={temp_dir} " in command:
                return int(entry)
        time.sleep(0.05)
    raise AssertionError(f"no head `ray start` with temp dir {temp_dir} within {timeout:g} s")


def _stop_its_raylet(start: int, timeout: float) -> int:
    """Stop (SIGSTOP) the raylet the head's `ray start` spawns, the moment it is spawned (its child, looked
    for every 2 ms): the head machine's load, at its worst, before the raylet registers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{start}/task/{start}/children").read_text().split()
        except OSError as gone:
            raise AssertionError("the head's `ray start` ended before it spawned its raylet") from gone
        for child in map(int, children):
            if "raylet/raylet" in _cmdline(child):
                os.kill(child, signal.SIGSTOP)
                return child
        time.sleep(0.002)
    raise AssertionError(f"the head's `ray start` spawned no raylet within {timeout:g} s")


def test_a_head_whose_raylet_registers_late_starts_again_its_workers_follow_and_the_job_completes(
    local_sandbox: Plan, workdir: Path
) -> None:
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "head-again"
    steps = 3
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={
            "GRPO_ENTRYPOINT": jobs.probe_command(checkpoints, steps=steps, step_seconds=1.0),
            "GRPO_RAY_READY_TIMEOUT": "300",
        },
        cwd=workdir,
    )
    head = local_sandbox.nodes[0].name
    start = _head_start(local_sandbox.ray_tmp / f"grpo-{job}" / head, timeout=180)
    raylet = _stop_its_raylet(start, timeout=120)
    try:
        # Stopped until the head's `ray start` gave up on it (it exits), however long a loaded machine takes.
        deadline = time.monotonic() + HEAD_STALL_S + 90
        while Path(f"/proc/{start}").exists():
            assert time.monotonic() < deadline, "the head's `ray start` did not give up on its stopped raylet"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(raylet, signal.SIGCONT)
    state = jobs.wait_for_state(job, jobs.FINAL_STATES, timeout=420)
    output = jobs.output(job)
    assert state == "COMPLETED", output[-3000:]
    assert (
        f"Ray head on {head} stopped while it joined (its raylet did not register in time: timed out during "
        "startup); stopping what it left and starting again"
    ) in output, output[-3000:]
    # Every worker had reached for the first GCS; each saw it go and joined the second.
    gcs = f"{local_sandbox.nodes[0].address}:{gcs_port(local_sandbox, job)}"
    for worker in local_sandbox.nodes[1:]:
        assert (
            f"Ray worker on {worker.name} stopped while it joined (the head's GCS at {gcs} was gone); stopping what "
            "it left and starting again"
        ) in output, output[-3000:]
    saved = [e["step"] for e in jobs.probe_events(output) if e["event"] == "checkpoint"]
    assert saved == list(range(1, steps + 1)), output[-3000:]
    assert jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}") == {}
