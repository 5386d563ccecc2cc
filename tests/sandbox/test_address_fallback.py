"""Where Ray binds when the stack's interface is missing on the nodes: the address the node's hostname
resolves to, or, if that is only loopback, nowhere — the job fails before any Ray starts. Never
loopback, never 0.0.0.0 (docs/slurm.md, the sbatch's `resolve_address`)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment

pytestmark = pytest.mark.sandbox

MISSING = "ens99"  # an interface no sandbox node has


def _script_without_the_interface(plan: Plan, workdir: Path) -> Path:
    """The sandbox's own stack, rendered with an interface its nodes do not have.

    The fabric gate is off: Gloo and NCCL are told the same (missing) interface and do not fall back
    with Ray's address; this tests where Ray binds.
    """
    data = plan.env.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["slurm"]["interface"] = MISSING
    data["job"].setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False
    for pool in data["pools"]:
        pool.get("fabric", {}).pop("interfaces", None)
    script = workdir / "grpo.sbatch"
    script.write_text(render_files(Environment.model_validate(data))[SBATCH_PATH])
    script.chmod(0o755)
    return script


def _output(job: int) -> str:
    """The job's output, also kept in /tmp for a look after a failure (the workdir goes with the test)."""
    text = jobs.output(job)
    Path(f"/tmp/grpo-address-fallback-{job}.out").write_text(text)
    return text


def _no_ray_left(plan: Plan, job: int) -> dict[str, list[str]]:
    deadline, left = time.monotonic() + 15, {"?": []}
    while left and time.monotonic() < deadline:
        left = jobs.ray_processes([n.namespace for n in plan.nodes], f"grpo-{job}/")
        time.sleep(0.5)
    return left


def test_a_missing_interface_falls_back_to_the_hostnames_address(local_sandbox: Plan, workdir: Path) -> None:
    script = _script_without_the_interface(local_sandbox, workdir)
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo trained on $GRPO_RAY_HEAD_ADDRESS"})
    job = jobs.submit(script, extra_env=env, cwd=workdir)
    state = jobs.wait_for_state(job, timeout=240)
    output = _output(job)
    assert state == "COMPLETED", output[-3000:]
    for node in local_sandbox.nodes:
        assert f"interface {MISSING} has no IPv4 address on {node.name}; falling back to {node.address}" in output, (
            output[-3000:]
        )
    started = re.findall(r"starting Ray \S+ at (\S+) with", output)
    assert sorted(started) == sorted(n.address for n in local_sandbox.nodes), output[-3000:]
    assert not any(a.startswith("127.") or a == "0.0.0.0" for a in started)
    assert "trained on " in output, output[-3000:]
    assert _no_ray_left(local_sandbox, job) == {}


def test_no_usable_address_fails_the_job_before_any_ray_starts(local_sandbox: Plan, workdir: Path) -> None:
    """A node whose hostname resolves to loopback only (a common /etc/hosts default): no address to bind."""
    script = _script_without_the_interface(local_sandbox, workdir)
    bindir = workdir / "bin"
    bindir.mkdir()
    (bindir / "hostname").write_text("#!/bin/sh\necho localhost\n")
    (bindir / "hostname").chmod(0o755)
    env = jobs.job_environment({"GRPO_ENTRYPOINT": "echo training must not start; exit 3"})
    env["PATH"] = f"{bindir}:{env['PATH']}"
    job = jobs.submit(script, extra_env=env, cwd=workdir)
    state = jobs.wait_for_state(job, timeout=240)
    output = _output(job)
    assert state == "FAILED", output[-3000:]
    assert re.search(
        rf"no address for Ray on node\d: interface {MISSING} has no IPv4 address and localhost resolves to no "
        "non-loopback address",
        output,
    ), output[-3000:]
    assert "starting Ray" not in output and "training must not start" not in output
    assert _no_ray_left(local_sandbox, job) == {}
