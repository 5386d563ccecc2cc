"""Gang start and exit of the rendered local-slurm sbatch on the sandbox, for several N, gate off and on.

Prints, per N: the median (and range) over several jobs of the seconds from the job's start
(slurmctld's "Started JobId") to "every node and GPU joined, training launched" (the entrypoint's
first instant), its ratio to one `ray start --head` timed on this machine in the same run (median of
as many), and the seconds from the training command's end to the job's COMPLETED (slurmctld's
"done"; this includes stopping the job's Ray gracefully on every node). Also the machine's load
average, which these numbers move with. Needs root. Not a test:
`python benchmarks/sandbox_bench.py [--runs 3] [--nodes 2,3,4]`.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import statistics
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
LOCK = Path("/tmp/grpo-sandbox.lock")


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


def timed_jobs(nodes: int, gate: bool, runs: int) -> list[tuple[float, float]]:
    """`runs` jobs one after the other on one sandbox of `nodes` nodes: (start→launched, end→COMPLETED)."""
    env = stack_env(gate)
    LOCK.touch(exist_ok=True)
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one sandbox per machine: wait for the tests' to be down
        return _timed_jobs(env, nodes, gate, runs)


def _timed_jobs(env: Environment, nodes: int, gate: bool, runs: int) -> list[tuple[float, float]]:
    plan = sandbox.up("local-slurm", env, nodes)
    results = []
    try:
        for run in range(runs):
            with tempfile.TemporaryDirectory(prefix="bench-") as work:
                marks = Path(work) / "marks"
                probe = jobs.probe_command(Path(env.job.checkpoint.dir) / f"bench-{nodes}-{gate}-{run}", steps=1)
                entry = f"date +%s.%N >> {marks}; {probe}; rc=$?; date +%s.%N >> {marks}; exit $rc"
                job = jobs.submit(plan.sbatch, extra_env={"GRPO_ENTRYPOINT": entry}, cwd=Path(work))
                state = jobs.wait_for_state(job, timeout=300)
                if state != "COMPLETED":
                    raise RuntimeError(f"job {job} ended {state}:\n{jobs.output(job)[-2000:]}")
                launched, ended = (float(x) for x in marks.read_text().split())
                log = plan.ctl_dir / "slurmctld.log"
                started = ctl_time(log, rf"(Allocate|Started) JobId={job}\b")
                done = ctl_time(log, rf"_job_complete: JobId={job} done")
                results.append((launched - started, done - ended))
    finally:
        sandbox.down()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="jobs per configuration (medians are reported)")
    parser.add_argument("--nodes", default="2,3,4", help="comma-separated node counts (gate off)")
    parser.add_argument("--gate-nodes", default="3", help="comma-separated node counts with the fabric gate on")
    args = parser.parse_args(argv)
    configs = [(int(n), False) for n in args.nodes.split(",")] + [(int(n), True) for n in args.gate_nodes.split(",")]
    load = os.getloadavg()
    heads = [ray_head_seconds() for _ in range(args.runs)]
    head = statistics.median(heads)
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)")
    print(
        f"one `ray start --head` on this machine: median {head:.1f} s of {args.runs} ({min(heads):.1f}-{max(heads):.1f})"
    )
    print(
        f"{'nodes':>5}  {'fabric gate':>11}  {'start→training launched (median, range)':>40}  {'× ray start --head':>18}"
        f"  {'training end→COMPLETED':>23}"
    )
    for nodes, gate in configs:
        results = timed_jobs(nodes, gate, args.runs)
        starts, exits = [r[0] for r in results], [r[1] for r in results]
        start = statistics.median(starts)
        spread = f"({min(starts):.1f}-{max(starts):.1f})"
        print(
            f"{nodes:>5}  {'on' if gate else 'off':>11}  {start:>22.1f} s {spread:>15}  {start / head:>18.2f}"
            f"  {statistics.median(exits):>21.1f} s",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
