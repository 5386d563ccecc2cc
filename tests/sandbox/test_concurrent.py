"""Two rendered jobs share the sandbox's nodes at once: no port clash, and cancelling one spares the other.

GPUs (GRES) are never shared between Slurm jobs, so the cluster is built from a variant of
local-slurm whose nodes advertise 16 placeholder GPUs and 8 CPUs and whose partition has
`OverSubscribe=YES`; the job is the sbatch rendered from a second variant asking for 8 GPUs and
4 CPUs per node. Submitted twice, both jobs fit on the same three nodes at the same time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from grpo_infra import sandbox, synth
from grpo_infra.ports import MIN_BLOCK_SIZE, ray_ports
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from grpo_infra.spec import Environment, load_stack

from .conftest import ROOT, bring_up

pytestmark = pytest.mark.sandbox

NODES = 3
STACK = "local-slurm-shared"
# What each node advertises, and what one job asks for per node: exactly two jobs fit side by side.
NODE_GPUS, NODE_CPUS = 16, 8
JOB_GPUS, JOB_CPUS = 8, 4
# The job that is cancelled trains "forever"; the one that survives must outlive the other's cleanup.
SURVIVOR_STEPS, SURVIVOR_STEP_SECONDS = 12, 1.5
READY_TIMEOUT_S = 150


def shared_variant(tmp: Path, name: str, gpus: int, cpus: int) -> Environment:
    """local-slurm with shared nodes (`oversubscribe: "yes"`) and `gpus`/`cpus` per node, as a stack file."""
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local-slurm.yaml").read_text(encoding="utf-8"))
    environment = document["config"]["grpo-infra:environment"]
    environment["slurm"]["oversubscribe"] = "yes"  # a string: a bare YAML yes would be a boolean
    environment["slurm"]["gres"]["files"] = f"/run/grpo-sandbox/dev/nvidia[0-{gpus - 1}]"
    pool = environment["pools"][0]
    pool["gpu"]["perNode"], pool["cpus"] = gpus, cpus
    for layout in environment["slurm"].get("nodeLayouts", []):  # the layout must add up to the CPUs
        layout["coresPerSocket"] = cpus // (layout.get("sockets", 1) * layout.get("threadsPerCore", 1))
    environment["tenants"][0]["gpuQuota"] = NODES * gpus
    path = tmp / "stacks" / f"Pulumi.{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return load_stack(name, tmp).environment


@dataclass
class Observed:
    """What the two jobs did, recorded at the moments that matter."""

    cancelled: int = 0
    survivor: int = 0
    sbatch: str = ""
    # While both ran: squeue's (state, node list) per job, listening TCP ports per node.
    squeue: dict[int, tuple[str, str]] = field(default_factory=dict)
    node_lists: dict[int, str] = field(default_factory=dict)
    listening: dict[str, set[int]] = field(default_factory=dict)
    # The survivor's long-lived Ray daemons (raylet, gcs_server) before the other job was cancelled.
    survivor_daemons: dict[int, str] = field(default_factory=dict)
    # After the cancelled job's cleanup ended.
    cancelled_state: str = ""
    cleanup_seconds: float = 0.0
    cleanup_done_at: float = 0.0
    cancelled_left: dict[str, list[str]] = field(default_factory=dict)
    survivor_state_then: str = ""
    survivor_daemons_alive: dict[int, str] = field(default_factory=dict)
    survivor_ray_then: dict[str, list[str]] = field(default_factory=dict)
    # At the end.
    survivor_state: str = ""
    outputs: dict[int, str] = field(default_factory=dict)
    survivor_checkpoints: Path = Path()


def ray_daemons(plan: Plan, marker: str) -> dict[int, str]:
    """pid → command line of each raylet and GCS server whose command line names `marker` (a job's temp dir)."""
    found: dict[int, str] = {}
    for node in plan.nodes:
        for pid in sandbox.namespace_pids(node.namespace):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                cmd = b" ".join(argv).decode(errors="replace")
                # The program itself, not an argument: a Ray worker's command line names the raylet's socket
                # (`--raylet-name=.../sockets/raylet`), and workers come and go while the job runs.
                program = argv[0].decode(errors="replace")
                if marker in cmd and program.endswith(("/raylet", "/gcs_server")):
                    found[pid] = f"{node.name}: {cmd.strip()}"
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def listening_ports(namespace: str) -> set[int]:
    """TCP ports listening inside one node's network namespace."""
    proc = subprocess.run(
        ["nsenter", f"--net=/run/netns/{namespace}", "ss", "-ltnH"],
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in proc.stdout.splitlines() if line.strip()}


def squeue(job_ids: list[int]) -> dict[int, tuple[str, str]]:
    """One `squeue` call: each job's state and node list at the same moment."""
    proc = subprocess.run(
        ["squeue", "-h", "-j", ",".join(map(str, job_ids)), "-o", "%i %T %N"],
        env=sandbox.slurm_env(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    rows = (line.split() for line in proc.stdout.splitlines() if line.strip())
    return {int(r[0]): (r[1], r[2] if len(r) > 2 else "") for r in rows}


def job_steps(job: int) -> list[str]:
    """The job's steps Slurm still knows as running (the batch step is not listed)."""
    proc = subprocess.run(
        ["squeue", "-h", "-s", "-j", str(job), "-o", "%i"],
        env=sandbox.slurm_env(),
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    return proc.stdout.split()


def wait_until(predicate: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    """Poll until `predicate` holds; at the timeout fail with `what()` (the jobs' states and output)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what()
        time.sleep(0.3)


@pytest.fixture(scope="module")
def shared_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plan]:
    """A 3-node sandbox whose nodes two jobs can share: 16 GPUs and 8 CPUs each, OverSubscribe=YES."""
    cluster = shared_variant(tmp_path_factory.mktemp("cluster"), STACK, NODE_GPUS, NODE_CPUS)
    yield from bring_up(cluster, NODES, stack=STACK)


@pytest.fixture(scope="module")
def observed(shared_sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    """Run two jobs side by side, cancel the first while both train, and let the second finish."""
    job_env = shared_variant(tmp_path_factory.mktemp("job"), f"{STACK}-job", JOB_GPUS, JOB_CPUS)
    workdir = tmp_path_factory.mktemp("concurrent")
    script = workdir / "grpo.sbatch"
    script.write_text(synth.render(job_env)["slurm/grpo.sbatch"], encoding="utf-8")
    checkpoints = Path(shared_sandbox.env.job.checkpoint.dir)
    seen = Observed(sbatch=script.read_text(encoding="utf-8"), survivor_checkpoints=checkpoints / "survivor")

    def submit(entrypoint: str) -> int:
        extra = {"GRPO_ENTRYPOINT": entrypoint, "GRPO_RAY_READY_TIMEOUT": str(READY_TIMEOUT_S)}
        return jobs.submit(script, extra_env=extra, cwd=workdir)

    seen.cancelled = submit(jobs.probe_command(checkpoints / "cancelled", steps=10_000, step_seconds=1.0))
    seen.survivor = submit(
        jobs.probe_command(seen.survivor_checkpoints, steps=SURVIVOR_STEPS, step_seconds=SURVIVOR_STEP_SECONDS)
    )
    both = [seen.cancelled, seen.survivor]
    try:
        # Both probes placed their bundles: each job's Ray cluster is whole and training.
        def placed(job: int) -> bool:
            assert jobs.job_state(job) not in jobs.FINAL_STATES, f"job {job} ended early:\n{jobs.output(job)[-3000:]}"
            return any(e["event"] == "placement" for e in jobs.probe_events(jobs.output(job)))

        wait_until(
            lambda: all(placed(j) for j in both),
            READY_TIMEOUT_S + 30,
            lambda: "\n".join(f"job {j}: {jobs.job_state(j)}\n{jobs.output(j)[-2000:]}" for j in both),
        )
        seen.squeue = squeue(both)
        seen.node_lists = {j: jobs.job_info(j).get("NodeList", "") for j in both}
        seen.listening = {n.name: listening_ports(n.namespace) for n in shared_sandbox.nodes}
        seen.survivor_daemons = ray_daemons(shared_sandbox, f"grpo-{seen.survivor}/")

        # Cancel one job while the other trains; wait until its cleanup has left no Ray process behind.
        started = time.monotonic()
        subprocess.run(["scancel", str(seen.cancelled)], env=sandbox.slurm_env(), timeout=15, check=True)
        seen.cancelled_state = jobs.wait_for_state(seen.cancelled, timeout=30)
        namespaces = [n.namespace for n in shared_sandbox.nodes]
        # Slurm marks the job CANCELLED at once and ends its steps after; wait for them, then look.
        wait_until(lambda: not job_steps(seen.cancelled), 30, lambda: f"steps of job {seen.cancelled} never ended")
        seen.cancelled_left = {
            str(pid): [cmd] for pid, cmd in jobs.holders_of(shared_sandbox.ray_tmp / f"grpo-{seen.cancelled}").items()
        }
        seen.cleanup_seconds = time.monotonic() - started
        seen.cleanup_done_at = time.time()
        seen.survivor_state_then = jobs.job_state(seen.survivor)
        seen.survivor_daemons_alive = {p: c for p, c in seen.survivor_daemons.items() if alive(p)}
        seen.survivor_ray_then = jobs.ray_processes(namespaces, f"grpo-{seen.survivor}/")

        seen.survivor_state = jobs.wait_for_state(seen.survivor, timeout=120)
        seen.outputs = {j: jobs.output(j) for j in both}
        yield seen
    finally:
        # Never leave a job running into the next module's sandbox (down() would kill it anyway).
        for job in both:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run(["scancel", str(job)], env=sandbox.slurm_env(), timeout=15, check=False)


def test_both_jobs_run_at_once_on_the_same_nodes(observed: Observed, shared_sandbox: Plan) -> None:
    assert "#SBATCH --oversubscribe" in observed.sbatch and "--exclusive" not in observed.sbatch
    assert f"#SBATCH --gres=gpu:sim:{JOB_GPUS}" in observed.sbatch
    running = {job: state for job, (state, _) in observed.squeue.items()}
    assert running == {observed.cancelled: "RUNNING", observed.survivor: "RUNNING"}, observed.squeue
    node_list = str(shared_sandbox.node_list)
    assert {nodes for _, nodes in observed.squeue.values()} == {node_list}
    assert set(observed.node_lists.values()) == {node_list}


def test_each_probe_sees_exactly_its_own_nodes_and_gpus(observed: Observed, shared_sandbox: Plan) -> None:
    names = sorted(n.name for n in shared_sandbox.nodes)
    for job in (observed.cancelled, observed.survivor):
        events = {e["event"]: e for e in jobs.probe_events(observed.outputs[job])}
        assert events["nodes"]["count"] == NODES, observed.outputs[job][-3000:]
        assert all(n["gpus"] == JOB_GPUS for n in events["nodes"]["nodes"])
        assert sorted(b["node"] for b in events["placement"]["bundles"]) == names  # one bundle per node
        assert f"joined {NODES}/{NODES} nodes, {NODES * JOB_GPUS}/{NODES * JOB_GPUS} GPUs" in observed.outputs[job]


def test_port_blocks_differ_and_both_are_bound_on_every_node(observed: Observed, shared_sandbox: Plan) -> None:
    assert shared_sandbox.env.slurm is not None
    rng = shared_sandbox.env.slurm.ray_ports
    blocks = {
        job: ray_ports(rng.start, rng.end, job, MIN_BLOCK_SIZE) for job in (observed.cancelled, observed.survivor)
    }
    a, b = blocks[observed.cancelled], blocks[observed.survivor]
    assert not a.all() & b.all()
    for job, ports in blocks.items():
        # The script's own log line: the rendered shell arithmetic agrees with grpo_infra/ports.py.
        assert (
            f"Ray ports {ports.gcs}-{ports.max_worker} (GCS {ports.gcs}, dashboard {ports.dashboard})"
            in (observed.outputs[job])
        )
        for node, listening in observed.listening.items():
            assert ports.node_manager in listening, f"job {job}'s raylet not listening on {node}"
        # Both heads run on the first node of the allocation, each on its own GCS port.
        assert ports.gcs in observed.listening[shared_sandbox.nodes[0].name]


def test_cancelling_one_job_leaves_the_other_running_and_completing(observed: Observed, shared_sandbox: Plan) -> None:
    assert observed.cancelled_state == "CANCELLED"
    assert observed.cancelled_left == {}, "the cancelled job's Ray survived its cleanup"
    assert observed.survivor_state_then == "RUNNING", (
        f"the survivor was {observed.survivor_state_then} when the other's cleanup ended "
        f"({observed.cleanup_seconds:.1f}s); raise SURVIVOR_STEPS"
    )
    # Every raylet and the GCS of the survivor lived through the other job's cleanup.
    names = sorted(n.name for n in shared_sandbox.nodes)
    nodes = sorted({cmd.split(":", 1)[0] for cmd in observed.survivor_daemons.values() if "/raylet " in cmd})
    assert nodes == names, observed.survivor_daemons
    assert any("/gcs_server " in cmd for cmd in observed.survivor_daemons.values())
    assert observed.survivor_daemons_alive == observed.survivor_daemons
    assert sorted(observed.survivor_ray_then) == sorted(n.namespace for n in shared_sandbox.nodes)

    output = observed.outputs[observed.survivor]
    assert observed.survivor_state == "COMPLETED", output[-3000:]
    steps = {e["step"]: e["time"] for e in jobs.probe_events(output) if e["event"] == "checkpoint"}
    assert sorted(steps) == list(range(1, SURVIVOR_STEPS + 1))
    # It kept training across all three nodes after the other job's Ray was gone.
    later = [s for s, t in steps.items() if t > observed.cleanup_done_at]
    assert later, f"no step after the cleanup ({observed.cleanup_seconds:.1f}s); raise SURVIVOR_STEPS"
    placement = json.loads((observed.survivor_checkpoints / f"global_step_{later[0]}" / "probe.json").read_text())
    assert sorted(b["node"] for b in placement["placement"]) == names
    # The cancelled job was stopped, not finished.
    assert not any(e["event"] == "done" for e in jobs.probe_events(observed.outputs[observed.cancelled]))
