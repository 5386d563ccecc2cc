"""A disaggregated job on the real Slurm sandbox: one heterogeneous job holds the trainer's and the rollout's
nodes all at once or none, Ray spans both, and every rank lands on its role's pool.

The stack is local-slurm with two pools in its partition: `sim` (node1, 8 placeholder GPUs) for the trainer and
`sim-rollout` (node2, node3, 4 GPUs each) for the rollout. With one rollout node drained the rollout is a node
short: the job pends whole and the trainer's node stays idle (no component starts alone). Resumed, the job
starts, each node's Ray advertises its pool, and the probe, placing the roles as verl 0.9.1 does, reports each
rank's role and node. A crash after the first checkpoint requeues the whole job, and its next run resumes.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra import synth, training
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from grpo_infra.spec import Environment
from tests.slurm.variants import ROLLOUT, STACK_DISAGGREGATED, TRAINER, disaggregated_variant

from .conftest import bring_up

pytestmark = pytest.mark.sandbox

# Long enough for several backfill passes (the sandbox's bf_interval is 5 s): a job that could start, would.
PENDING_SECONDS = 15


@pytest.fixture(scope="module")
def disaggregated() -> Iterator[tuple[Environment, Plan]]:
    env = disaggregated_variant()
    for plan in bring_up(env, nodes=3, stack=STACK_DISAGGREGATED):
        yield env, plan


def scontrol(*args: str) -> str:
    proc = subprocess.run(["scontrol", *args], env=jobs.job_environment(), capture_output=True, text=True, timeout=15)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def node_state(node: str) -> str:
    proc = subprocess.run(
        ["sinfo", "--noheader", "--nodes", node, "--format=%T"],
        env=jobs.job_environment(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    return proc.stdout.strip()


def running_on(node: str) -> list[str]:
    """The ids of the jobs running on the node."""
    proc = subprocess.run(
        ["squeue", "--noheader", f"--nodelist={node}", "--states=RUNNING", "--format=%i"],
        env=jobs.job_environment(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    return proc.stdout.split()


def component_states(job_id: int) -> list[str]:
    """squeue's state of each component of the heterogeneous job, in component order."""
    proc = subprocess.run(
        ["squeue", "--noheader", f"--jobs={job_id}", "--format=%i %T"],
        env=jobs.job_environment(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    return [state for _, state in sorted(line.split() for line in proc.stdout.splitlines())]


def test_the_roles_start_together_or_not_at_all_and_each_rank_runs_on_its_roles_pool(
    disaggregated: tuple[Environment, Plan], tmp_path: Path
) -> None:
    env, _ = disaggregated
    checkpoints = Path(env.job.checkpoint.dir)
    subprocess.run(["rm", "-rf", str(checkpoints)], check=True)
    checkpoints.mkdir(parents=True)
    script = tmp_path / "grpo.sbatch"
    script.write_text(synth.render(env)["slurm/grpo.sbatch"], encoding="utf-8")
    roles = training.probe_roles(env)
    # The first run trains step 1 and crashes; the sbatch requeues the whole job, whose second run resumes at step 1.
    first, second = (jobs.probe_command(checkpoints, steps=n, roles=roles) for n in (1, 2))
    entry = f'if [ "$GRPO_RESTART_COUNT" = 0 ]; then {first} && exit 3; else {second}; fi'

    scontrol("update", "nodename=node3", "state=drain", "reason=rollout one node short")
    try:
        job = jobs.submit(script, extra_env={"GRPO_ENTRYPOINT": entry}, cwd=tmp_path)
        time.sleep(PENDING_SECONDS)
        # The rollout is a node short: neither component starts, and the trainer's node runs nothing (backfill may
        # mark it PLANNED: kept for this job's start, free meanwhile for jobs that end before it).
        assert component_states(job) == ["PENDING", "PENDING"]
        assert node_state("node1") in ("idle", "planned")
        assert running_on("node1") == []
    finally:
        scontrol("update", "nodename=node3", "state=resume")

    assert jobs.wait_for_state(job, timeout=240) == "COMPLETED", jobs.output(job)
    output = jobs.output(job)
    assert f"job {job} outcome: success" in output
    # The crash requeued every component: the second run held all three nodes again and resumed.
    assert "requeueing after a crash (status 3, restart 0)" in output
    assert f"job {job}, restart 1: 3 nodes (node[1-3]), 16 GPUs" in output
    assert "3 nodes (node[1-3]), 16 GPUs: trainer node1 x 8 GPUs, rollout node[2-3] x 4 GPUs" in output
    events = jobs.probe_events(output)
    pools = {n["ip"]: n["pool"] for n in next(e for e in events if e["event"] == "nodes")["nodes"]}
    assert sorted(pools.values()) == [TRAINER, ROLLOUT, ROLLOUT]
    ranks = next(e for e in events if e["event"] == "placement")["ranks"]
    where = {(r["role"], r["node"], r["pool"]) for r in ranks}
    assert where == {("trainer", "node1", TRAINER), ("rollout", "node2", ROLLOUT), ("rollout", "node3", ROLLOUT)}
    assert [r["role"] for r in ranks].count("trainer") == 8 and len(ranks) == 16
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [1, 2]
    assert [(e["event"], e["from_step"]) for e in events if e["event"] in ("start", "resume")] == [
        ("start", 0),
        ("resume", 1),
    ]
