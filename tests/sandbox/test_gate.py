"""The nccl backend of the fabric gate on real Slurm: a failing fabric stops the job before Ray starts.

The sandbox has no CUDA, so a stand-in for all_reduce_perf (a script) takes the binary's place; the
srun step that launches it (one rank per GPU on every node), the verdict and the job's reaction are
the rendered script's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from tests.sandbox.conftest import bring_up
from tests.slurm.variants import variant

pytestmark = pytest.mark.sandbox

# Every rank reports where Slurm put it; the ranks on node3 die as NCCL does when its network fails.
STAND_IN = """#!/bin/bash
printf 'rank %s local %s on %s\\n' "$SLURM_PROCID" "$SLURM_LOCALID" "$(hostname)"
if [[ $(hostname) == node3 ]]; then
  echo "$(hostname):$$:$$ [$SLURM_LOCALID] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0>"
  echo "Test NCCL failure common.cu:1005 'unhandled system error'"
  exit 1
fi
sleep 5
"""


@pytest.fixture(scope="module")
def gate_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("nccl-tests") / "all_reduce_perf"
    binary.write_text(STAND_IN)
    binary.chmod(0o755)
    return binary


@pytest.fixture(scope="module")
def nccl_sandbox(gate_env: Path) -> Iterator[Plan]:
    env = variant(
        "local-slurm",
        lambda d: d["job"]["preflight"]["nccl"].update(backend="nccl", allReducePerf=str(gate_env), mpi="none"),
    )
    yield from bring_up(env)


@pytest.fixture(scope="module")
def failed_job(nccl_sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("gate")
    job = jobs.submit(nccl_sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": "echo ENTRYPOINT RAN"}, cwd=workdir)
    state = jobs.wait_for_state(job, timeout=120)
    namespaces = [n.namespace for n in nccl_sandbox.nodes]
    gate_dir = workdir / f"grpo-sandbox-{job}-gate"
    return {
        "job": job,
        "state": state,
        "output": jobs.output(job),
        "ray": jobs.ray_processes(namespaces),
        "dir": gate_dir,
    }


def test_failing_fabric_stops_the_job_before_ray(failed_job: dict[str, Any]) -> None:
    output = failed_job["output"]
    assert failed_job["state"] == "FAILED", output[-3000:]
    lines = output.splitlines()
    fail_lines = [line for line in lines if "ERROR: fabric gate: FAIL" in line]
    assert len(fail_lines) == 1
    # The job's last line repeats the reason as its outcome.
    assert re.search(r"job \d+ outcome: FAILED: fabric gate: FAIL all_reduce_perf exited", lines[-1]), lines[-1]
    # srun's status is the worst of its tasks': 1 from node3, or 143 from the ranks it then ended.
    assert re.search(
        r"ERROR: fabric gate: FAIL all_reduce_perf exited with status (1|143); fabric=none ", fail_lines[0]
    )
    assert "unhandled system error" in fail_lines[0], fail_lines[0]
    assert "Ray not started" in fail_lines[0]
    assert "starting Ray" not in output and "ENTRYPOINT RAN" not in output and "training launched" not in output
    assert failed_job["ray"] == {}


def test_gate_step_put_one_rank_on_every_gpu_of_every_node(failed_job: dict[str, Any]) -> None:
    log = (failed_job["dir"] / "all_reduce_perf.run0.log").read_text()
    placed = {line.split()[-1] for line in log.splitlines() if line.startswith("rank ") and " on node3" in line}
    assert placed == {"node3"}
    ranks = [line.split() for line in log.splitlines() if line.startswith("rank ")]
    # node3's ranks always report; the others may be killed first (--kill-on-bad-exit), but never doubled.
    node3 = sorted(int(r[3]) for r in ranks if r[5] == "node3")
    assert node3 == list(range(8))
    assert len({r[1] for r in ranks}) == len(ranks)
    assert (failed_job["dir"] / "verdict.run0.log").read_text().startswith("FAIL fabric=none")
