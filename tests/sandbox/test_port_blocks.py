"""Two promises about a job's Ray ports on real slurmd nodes (network namespaces of this machine):

- a node whose kernel may hand a port of the job's block to an outgoing connection (its own
  net.ipv4.ip_local_port_range widened, as DGX and GB200 images do) ends the job with that node's one line,
  before any Ray starts there; the same node with the block in net.ipv4.ip_local_reserved_ports runs the job;
- Ray takes one worker port per concurrent worker, and a node with more CPUs than a block of the old size
  has worker ports starves without the block `block_size` gives it (measured on one node's real raylet).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra.ports import WORKER_OFFSET, block_size, worker_ports_needed
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.cluster import which
from grpo_infra.sandbox.plan import Plan
from tests.sandbox.nodes import BIN, in_node_command

pytestmark = pytest.mark.sandbox

NODE = "node2"
SYS = "/proc/sys/net/ipv4"


def _namespace(plan: Plan, name: str) -> str:
    return next(n for n in plan.nodes if n.name == name).namespace


def _sysctl(plan: Plan, name: str, key: str, value: str | None = None) -> str:
    """Read (and with `value`, first write) net.ipv4.`key` in sandbox machine `name`'s network namespace."""
    nsenter = [which("nsenter") or "nsenter", f"--net=/run/netns/{_namespace(plan, name)}"]
    if value is not None:
        subprocess.run([*nsenter, "sh", "-c", f"echo '{value}' >{SYS}/{key}"], check=True)
    return subprocess.run([*nsenter, "cat", f"{SYS}/{key}"], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def widened_node(local_sandbox: Plan) -> Iterator[str]:
    """NODE with a DGX image's ephemeral range, restored after the test."""
    before_range = _sysctl(local_sandbox, NODE, "ip_local_port_range").split()
    before_reserved = _sysctl(local_sandbox, NODE, "ip_local_reserved_ports").strip()
    _sysctl(local_sandbox, NODE, "ip_local_port_range", "9000 65000")
    try:
        yield NODE
    finally:
        _sysctl(local_sandbox, NODE, "ip_local_port_range", " ".join(before_range))
        _sysctl(local_sandbox, NODE, "ip_local_reserved_ports", before_reserved)


def test_a_node_whose_ephemeral_range_holds_the_block_ends_the_job_in_one_line(
    local_sandbox: Plan, widened_node: str, workdir: Path
) -> None:
    job = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": "echo trained; exit 0"}, cwd=workdir)
    state = jobs.wait_for_state(job, timeout=240)
    output = jobs.output(job)
    assert state == "FAILED", output[-3000:]
    assert "trained" not in output
    block = re.search(r"Ray ports (\d+)-(\d+) ", output)
    assert block is not None, output[-3000:]
    outcome = output.rstrip().splitlines()[-1]
    assert (
        f"outcome: FAILED: the Ray step ended on {widened_node}: Ray's ports {block[1]}-{block[2]} overlap the "
        f"ephemeral port range 9000-65000 of node {widened_node} (net.ipv4.ip_local_port_range)"
    ) in outcome, outcome
    assert f"add {block[1]}-{block[2]} to net.ipv4.ip_local_reserved_ports on the node" in outcome

    # Reserved, the block is never handed out (ip-sysctl.rst): the same node runs the job.
    rng = local_sandbox.env.slurm.ray_ports if local_sandbox.env.slurm else None
    assert rng is not None
    _sysctl(local_sandbox, widened_node, "ip_local_reserved_ports", f"{rng.start}-{rng.end}")
    again = jobs.submit(local_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": "echo trained; exit 0"}, cwd=workdir)
    assert jobs.wait_for_state(again, timeout=240) == "COMPLETED", jobs.output(again)[-3000:]


# One node's Ray with --num-cpus=CPUS and a worker range of `ports` ports; a driver runs CPUS one-CPU tasks
# at once (each waits for all others, so all CPUS workers must hold a port together) and prints how many ran.
DRIVER = textwrap.dedent(
    """
    import sys, time, ray
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    cpus = int(sys.argv[2])
    @ray.remote(num_cpus=1)
    class Barrier:
        def __init__(self): self.n = 0
        def arrive(self): self.n += 1
        def count(self): return self.n
    barrier = Barrier.options(num_cpus=0).remote()
    @ray.remote(num_cpus=1)
    def task(barrier, cpus):
        import os
        ray.get(barrier.arrive.remote())
        while ray.get(barrier.count.remote()) < cpus:
            time.sleep(0.1)
        return os.getpid()
    refs = [task.remote(barrier, cpus) for _ in range(cpus)]
    ready, _ = ray.wait(refs, num_returns=cpus, timeout=float(sys.argv[3]))
    print(f"ran {len(set(ray.get(ready)))} of {cpus} at once", flush=True)
    """
)
CPUS = 24
NO_PORT = "No available ports"


def _run_ray(plan: Plan, tmp: Path, cpus: int, worker_ports: int, port: int, wait_s: int) -> tuple[str, list[str]]:
    """(the driver's line, the workers' port refusals) for one node's Ray whose worker range holds `worker_ports`
    ports. A worker refused a port logs it and exits (core_worker_process.cc: "Failed to register worker to
    Raylet: ... No available ports"), in its own log, not the raylet's."""
    ray = str(BIN / "ray")
    start = [
        ray, "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--num-gpus=0", f"--temp-dir={tmp}",
        f"--min-worker-port={port + WORKER_OFFSET}", f"--max-worker-port={port + WORKER_OFFSET + worker_ports - 1}",
        "--include-dashboard=false", "--disable-usage-stats",
    ]  # fmt: skip
    env = {**jobs.job_environment(), "RAY_AUTH_MODE": "disabled"}
    started = subprocess.run(in_node_command(plan, NODE, start), env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    try:
        driver = subprocess.run(
            in_node_command(plan, NODE, [sys.executable, "-c", DRIVER, f"{plan_address(plan)}:{port}", str(cpus), str(wait_s)]),
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        logs = [p for p in tmp.glob("session_*/logs/*") if p.is_file()]
        refused = [line for p in logs for line in p.read_text(errors="replace").splitlines() if NO_PORT in line]
        # The driver's own line; the raylet's warnings about many workers starting reach its stdout too.
        ran = [line for line in driver.stdout.splitlines() if line.startswith("ran ")]
        return (ran[-1] if ran else driver.stdout[-2000:] + driver.stderr[-2000:]), refused
    finally:
        subprocess.run(in_node_command(plan, NODE, [ray, "stop", "--force"]), env=env, capture_output=True)
        time.sleep(1)


def plan_address(plan: Plan) -> str:
    return next(n for n in plan.nodes if n.name == NODE).address


@pytest.fixture
def ray_temp() -> Iterator[Path]:
    """A Ray temp dir short enough for its sockets (AF_UNIX paths hold 107 bytes; pytest's tmp_path is longer)."""
    path = Path(tempfile.mkdtemp(prefix="grpo-ports-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_ray_holds_one_worker_port_per_concurrent_worker_and_the_sized_block_suffices(
    local_sandbox: Plan, ray_temp: Path
) -> None:
    # Fewer worker ports than the node's CPUs (a 224-CPU node on the former block of 240, scaled down): Ray
    # runs only as many workers at once as it has ports, and refuses the others a port.
    short = CPUS // 2
    line, refused = _run_ray(local_sandbox, ray_temp / "short", CPUS, short, 28000, wait_s=40)
    ran = re.search(r"ran (\d+) of", line)
    assert ran is None or int(ran[1]) < CPUS, line
    assert refused, "no worker was refused a port"
    # The worker ports grpo_infra/ports.py counts for such a node (and its block holds them): every task runs
    # at once, no port refused.
    needed = worker_ports_needed(CPUS, 0)
    assert block_size(CPUS, 0) - WORKER_OFFSET >= needed
    line, refused = _run_ray(local_sandbox, ray_temp / "sized", CPUS, needed, 28500, wait_s=120)
    assert line == f"ran {CPUS} of {CPUS} at once", line
    assert refused == []
