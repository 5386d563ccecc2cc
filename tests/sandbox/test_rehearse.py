"""`grpo-infra rehearse onprem-slurm` as docs/rehearsal.md runs it: the production Slurm stack's own rendered
slurm.conf fragment, gres.conf and sbatch on the real sandbox, shrunk to two of its own hosts, the probe in
verl's place; the job COMPLETES, and the placement table shows both hosts with their 8 GPUs."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import LOCK, ROOT, require_sandbox

pytestmark = pytest.mark.sandbox

CLI = str(Path(sys.executable).parent / "grpo-infra")


def test_onprem_slurm_rehearses_on_the_sandbox_and_its_job_completes() -> None:
    require_sandbox()
    LOCK.touch(exist_ok=True)
    started = time.monotonic()
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run([CLI, "rehearse", "onprem-slurm"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    assert proc.returncode == 0, out[-4000:]
    assert "pool h100-ib hosts: gpu[001-016] -> gpu[001-002] (sandbox nodes)" in out
    assert (
        "image: registry.hpc.example.internal/grpo/verl:0.9.1-vllm0.24.0-ray2.60.0-gate (pyxis) -> this machine's"
        in out
    )
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line.startswith("│")]
    assert sorted((r[0], r[2], r[4]) for r in rows) == [
        ("gpu001", "8", "0,1,2,3,4,5,6,7"),
        ("gpu002", "8", "0,1,2,3,4,5,6,7"),
    ]
    assert out.rstrip().endswith("COMPLETED")
    print(f"rehearsal of onprem-slurm: {time.monotonic() - started:.0f}s")
