"""The rendered local-slurm job on a 3-node sandbox: the gang forms, spreads and trains."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def finished_job(local_sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One rendered job with the probe as entrypoint, run to its end."""
    workdir = tmp_path_factory.mktemp("gang")
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "gang"
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={"GRPO_ENTRYPOINT": jobs.probe_command(checkpoints, steps=2), "GRPO_RAY_READY_TIMEOUT": "150"},
        cwd=workdir,
    )
    state = jobs.wait_for_state(job, timeout=150)
    yield {"job": job, "state": state, "output": jobs.output(job), "checkpoints": checkpoints}


def test_job_completes_on_every_node_with_one_bundle_each(finished_job: dict[str, Any], local_sandbox: Plan) -> None:
    assert finished_job["state"] == "COMPLETED", finished_job["output"][-3000:]
    events = {e["event"]: e for e in jobs.probe_events(finished_job["output"])}
    assert events["nodes"]["count"] == len(local_sandbox.nodes) == 3
    assert all(n["gpus"] == 8 for n in events["nodes"]["nodes"])
    placed = [b["node"] for b in events["placement"]["bundles"]]
    assert sorted(placed) == ["node1", "node2", "node3"]  # STRICT_SPREAD: one bundle per node
    assert len({b["ray_node_id"] for b in events["placement"]["bundles"]}) == 3
    assert (finished_job["checkpoints"] / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


def test_readiness_barrier_counts_every_node_and_gpu_before_training(finished_job: dict[str, Any]) -> None:
    lines = finished_job["output"].splitlines()
    joined = [i for i, line in enumerate(lines) if re.search(r"joined \d+/3 nodes, \d+/24 GPUs", line)]
    launched = next(i for i, line in enumerate(lines) if "training launched" in line)
    first_probe = next(i for i, line in enumerate(lines) if line.startswith("PROBE "))
    assert joined, "the barrier printed no count"
    assert "joined 3/3 nodes, 24/24 GPUs" in lines[joined[-1]]
    assert joined[-1] < launched < first_probe
    # The count rose while the barrier waited: it polled the cluster, it did not sleep a fixed time.
    assert len(joined) >= 2
