"""A node whose Ray never joins: the job ends at the readiness timeout and leaves no Ray behind. A node
whose Ray step dies (Ray fails, the task is killed) ends the job at once with one line naming the node,
instead of holding the allocation until the timeout; so does a Ray step that ends before the GCS answers."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox

READY_TIMEOUT_S = 25
BROKEN_NODE = "node3"


def broken_ray(
    bindir: Path, real_ray: Path, broken: str = 'echo "ray start made to fail on $(hostname) by the test" >&2; exit 1'
) -> None:
    """A `ray` first on PATH whose `ray start` runs `broken` on one node (its hostname), the real one elsewhere."""
    bindir.mkdir()
    shim = bindir / "ray"
    shim.write_text(
        "#!/bin/sh\n"
        f'if [ "$(hostname)" = {BROKEN_NODE} ] && [ "$1" = start ]; then\n'
        f"  {broken}\n"
        "fi\n"
        f'exec {real_ray} "$@"\n'
    )
    shim.chmod(0o755)


def test_missing_node_fails_at_the_timeout_with_a_clear_message(local_sandbox: Plan, workdir: Path) -> None:
    # node3's `ray start` hangs: its step lives on, its Ray never joins.
    broken_ray(workdir / "bin", Path(sys.executable).parent / "ray", "exec sleep 600")
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo training must not start; exit 3"})
    env["GRPO_RAY_READY_TIMEOUT"] = str(READY_TIMEOUT_S)
    env["PATH"] = f"{workdir / 'bin'}:{env['PATH']}"
    job = jobs.submit(local_sandbox.sbatch, extra_env=env, cwd=workdir)
    started = time.monotonic()
    state = jobs.wait_for_state(job, timeout=READY_TIMEOUT_S + 90, poll=0.05)
    output = jobs.output(job)

    assert state == "FAILED", output[-3000:]
    assert time.monotonic() - started < READY_TIMEOUT_S + 60
    assert "training must not start" not in output
    barrier = re.search(
        r"Ray readiness timeout after \d+ s: joined (\d)/3 nodes, (\d+)/24 GPUs; missing: (\S+)", output
    )
    assert barrier is not None, output[-3000:]
    assert int(barrier[1]) < 3
    assert BROKEN_NODE in barrier[3].split(",")
    assert f"not every node and GPU joined Ray within {READY_TIMEOUT_S} s" in output

    # Nothing of this job's Ray survives on any node: no process holds a file under its temp dirs.
    assert jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}") == {}


def test_a_ray_step_that_ends_before_the_gcs_ends_the_job_and_its_barrier(local_sandbox: Plan, workdir: Path) -> None:
    """The barrier starts with Ray and waits for the GCS itself; the batch shell still watches the Ray step."""
    bindir = workdir / "bin"
    bindir.mkdir()
    real_srun = shutil.which("srun", path=jobs.job_environment()["PATH"])
    assert real_srun is not None
    # An `srun` first on PATH that fails the Ray step (`--job-name=ray`) at once and runs every other step.
    (bindir / "srun").write_text(
        "#!/bin/bash\n"
        'for arg; do [[ $arg == --job-name=ray ]] && { echo "Ray step made to fail by the test" >&2; exit 1; }; done\n'
        f'exec {real_srun} "$@"\n'
    )
    (bindir / "srun").chmod(0o755)
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo training must not start; exit 3"})
    env["GRPO_RAY_READY_TIMEOUT"] = "240"
    env["PATH"] = f"{bindir}:{env['PATH']}"
    job = jobs.submit(local_sandbox.sbatch, extra_env=env, cwd=workdir)
    started = time.monotonic()
    state = jobs.wait_for_state(job, timeout=120, poll=0.05)
    output = jobs.output(job)

    assert state == "FAILED", output[-3000:]
    assert time.monotonic() - started < 60  # not the 240 s readiness timeout
    assert "training must not start" not in output
    assert "ERROR: the Ray step ended before the head's GCS answered on " in output
    # The barrier, waiting for a GCS that never comes, went with the job: no process of it is left.
    time.sleep(1)
    assert _barriers_of(workdir) == []
    assert jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}") == {}


def _barriers_of(workdir: Path) -> list[int]:
    """Pids of readiness barriers whose environment names this test's PATH (so: of its jobs)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"Readiness barrier of the GRPO sbatch" in cmdline and str(workdir / "bin").encode() in environ:
            found.append(int(proc.name))
    return found


def _fails_at_once_naming(local_sandbox: Plan, job: int, pattern: str, started: float) -> str:
    state = jobs.wait_for_state(job, timeout=120, poll=0.05)
    output = jobs.output(job)
    assert state == "FAILED", output[-3000:]
    assert time.monotonic() - started < 90, output[-3000:]  # not the 240 s readiness timeout
    assert "training must not start" not in output and "training launched" not in output
    errors = [line for line in output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, output[-3000:]
    assert re.search(pattern, errors[0]), errors[0]
    # Nothing of this job's Ray is left on any node, the dead node's included.
    assert jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}") == {}
    return output


def test_a_node_whose_ray_fails_ends_the_job_at_once_naming_it(local_sandbox: Plan, workdir: Path) -> None:
    broken_ray(workdir / "bin", Path(sys.executable).parent / "ray")
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo training must not start; exit 3"})
    env["GRPO_RAY_READY_TIMEOUT"] = "240"
    env["PATH"] = f"{workdir / 'bin'}:{env['PATH']}"
    job = jobs.submit(local_sandbox.sbatch, extra_env=env, cwd=workdir)
    started = time.monotonic()
    _fails_at_once_naming(
        local_sandbox,
        job,
        rf"ERROR: the Ray step ended on {BROKEN_NODE}: its Ray stopped by itself with status 1, ",
        started,
    )


def _ray_task_of(job: int, node: str) -> int | None:
    """The pid of `node`'s task of the job's Ray step (the bash running start_ray_node there)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            cmdline.split(b"\0")[0].endswith(b"bash")  # slurmstepd runs it by its full path
            and cmdline.rstrip(b"\0").endswith(b"start_ray_node")
            and f"SLURM_JOB_ID={job}".encode() in environ
            and f"SLURMD_NODENAME={node}".encode() in environ
        ):
            return int(proc.name)
    return None


def test_a_node_whose_ray_step_is_killed_during_start_up_ends_the_job_at_once(
    local_sandbox: Plan, workdir: Path
) -> None:
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo training must not start; exit 3"})
    env["GRPO_RAY_READY_TIMEOUT"] = "240"
    job = jobs.submit(local_sandbox.sbatch, extra_env=env, cwd=workdir)
    started = time.monotonic()
    deadline = started + 120
    while (pid := _ray_task_of(job, BROKEN_NODE)) is None:
        assert time.monotonic() < deadline, jobs.output(job)[-3000:]
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    output = _fails_at_once_naming(
        local_sandbox, job, rf"ERROR: the Ray step ended on {BROKEN_NODE}: task \d+: Killed", started
    )
    assert "joined 3/3 nodes" not in output
