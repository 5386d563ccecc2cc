"""Gang start and exit of the rendered local-slurm sbatch on the sandbox, for N = 2 and 3 nodes.

Prints, per N: seconds from the job's start (slurmctld's "Started JobId") to "every node and GPU
joined, training launched" (the entrypoint's first instant), next to one `ray start --head` on this
machine, and seconds from the training command's end to the job's COMPLETED (slurmctld's "done").
Needs root. Not a test: `python benchmarks/sandbox_bench.py`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from grpo_infra import sandbox
from grpo_infra.sandbox import jobs
from grpo_infra.spec import Environment, load_stack

ROOT = Path(__file__).resolve().parents[1]


def ctl_time(log: Path, pattern: str) -> float:
    """Epoch seconds of the first slurmctld log line matching `pattern` (its timestamps have ms)."""
    for line in log.read_text().splitlines():
        if re.search(pattern, line):
            stamp = line[1 : line.index("]")]
            return datetime.fromisoformat(stamp).timestamp()
    raise LookupError(pattern)


def ray_head_seconds() -> float:
    """One `ray start --head` on loopback, from launch to return, with its own temp dir and ports."""
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as temp:
        ray = Path(sys.executable).parent / "ray"
        cmd = [str(ray), "start", "--head", "--node-ip-address=127.0.0.1", "--port=29901", "--num-cpus=2"]
        cmd += [f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats"]
        started = time.monotonic()
        subprocess.run(cmd, capture_output=True, check=True)
        took = time.monotonic() - started
        # Stop only this head: every process of it runs under its temp dir.
        subprocess.run(["pkill", "-KILL", "-f", temp], check=False)
        return took


def stack_env(gate: bool) -> Environment:
    """local-slurm as shipped (fabric gate on), or with the gate off to time the Ray bootstrap alone."""
    env = load_stack("local-slurm", ROOT).environment
    if gate:
        return env
    data = env.model_dump(by_alias=True)
    data["job"]["preflight"]["nccl"]["enabled"] = False
    return Environment.model_validate(data)


def one_run(nodes: int, gate: bool) -> tuple[float, float]:
    env = stack_env(gate)
    plan = sandbox.up("local-slurm", env, nodes)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-") as work:
            marks = Path(work) / "marks"
            probe = jobs.probe_command(Path(env.job.checkpoint.dir) / f"bench-{nodes}", steps=1)
            entry = f"date +%s.%N >> {marks}; {probe}; rc=$?; date +%s.%N >> {marks}; exit $rc"
            job = jobs.submit(plan.sbatch, extra_env={"GRPO_ENTRYPOINT": entry}, cwd=Path(work))
            state = jobs.wait_for_state(job, timeout=300)
            if state != "COMPLETED":
                raise RuntimeError(f"job {job} ended {state}:\n{jobs.output(job)[-2000:]}")
            launched, ended = (float(x) for x in marks.read_text().split())
            log = plan.ctl_dir / "slurmctld.log"
            started = ctl_time(log, rf"(Allocate|Started) JobId={job}\b")
            done = ctl_time(log, rf"_job_complete: JobId={job} done")
            return launched - started, done - ended
    finally:
        sandbox.down()


def main() -> int:
    head = ray_head_seconds()
    print(f"one `ray start --head` on this machine: {head:.1f} s")
    print(
        f"{'nodes':>5}  {'fabric gate':>11}  {'start→training launched':>24}  {'× ray start --head':>18}"
        f"  {'training end→COMPLETED':>23}"
    )
    for gate in (False, True):
        for nodes in (2, 3):
            start, exit_ = one_run(nodes, gate)
            print(
                f"{nodes:>5}  {'on' if gate else 'off':>11}  {start:>22.1f} s  {start / head:>18.2f}  {exit_:>21.1f} s"
            )
    print(shlex.join(["machine:", f"{subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
