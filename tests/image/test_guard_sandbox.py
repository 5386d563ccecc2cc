"""The runtime guard in the sandbox's real job: 3 Slurm nodes, the rendered sbatch, the machine's own Python.

local-slurm declares the image this machine's .venv is (Ray 2.60.0, verl 0.9.1): its job passes the guard
on every node and runs. The same stack declaring Ray 2.59.0 stops within seconds with the guard's line,
before the fabric gate and before any Ray process exists.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment
from tests.sandbox.conftest import bring_up, local_slurm

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Plan]:
    yield from bring_up(local_slurm())


def _run(plan: Plan, script: Path, workdir: Path) -> dict[str, Any]:
    start = time.monotonic()
    job = jobs.submit(script, extra_env={"GRPO_ENTRYPOINT": "echo ENTRYPOINT RAN"}, cwd=workdir)
    state = jobs.wait_for_state(job, timeout=240)
    seconds = time.monotonic() - start
    print(f"job {job}: {state} {seconds:.1f} s after sbatch")
    return {"state": state, "seconds": seconds, "output": jobs.output(job)}


def _declaring_ray(plan: Plan, ray: str) -> Environment:
    data = plan.env.model_dump(by_alias=True, exclude_none=True)
    data["image"]["contents"]["ray"] = ray
    return Environment.model_validate(data)


def test_matching_image_passes_the_guard_on_every_node(sandbox: Plan, tmp_path: Path) -> None:
    run = _run(sandbox, sandbox.sbatch, tmp_path)
    assert run["state"] == "COMPLETED", run["output"][-3000:]
    for node in ("node1", "node2", "node3"):
        assert f"image guard [{node}]: PASS the image matches the stack's declaration" in run["output"]
    assert "ENTRYPOINT RAN" in run["output"]


def test_another_declared_ray_stops_the_job_within_seconds(sandbox: Plan, tmp_path: Path) -> None:
    script = tmp_path / "grpo.sbatch"
    script.write_text(render_files(_declaring_ray(sandbox, "2.59.0"))[SBATCH_PATH])
    run = _run(sandbox, script, tmp_path)
    output = run["output"]
    assert run["state"] == "FAILED", output[-3000:]
    for node in ("node1", "node2", "node3"):
        assert f"image guard [{node}]: FAIL ray 2.59.0 declared, 2.60.0 in the image" in output
    errors = [line for line in output.splitlines() if "ERROR:" in line]
    assert errors == [
        errors[0].split("] ")[0] + "] ERROR: image guard: the image differs from the stack's image.contents "
        "(FAIL line above); nothing started"
    ]
    assert "fabric gate" not in output.split("image guard")[-1] and "starting Ray" not in output
    assert "ENTRYPOINT RAN" not in output
