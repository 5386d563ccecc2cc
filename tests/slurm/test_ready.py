"""The readiness barrier against a real one-node Ray cluster: it counts, and it fails clearly."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra.slurmgen.sbatch import READY_PROGRAM
from tests import rayhead
from tests.conftest import unavailable

RAY = rayhead.RAY


def _stop_head(head: subprocess.Popen[bytes], temp: Path) -> None:
    rayhead.stop(head)
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not RAY.exists():
        unavailable("ray is not installed in this venv (extra `sandbox`)")
    temp = tmp_path_factory.mktemp("ray")
    port = rayhead.free_port()
    head = rayhead.start(temp, port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        _stop_head(head, temp)


def _barrier_argv(address: str, nodes: int, gpus: int, timeout: float) -> list[str]:
    args = ["--address", address, "--nodes", str(nodes), "--gpus", str(gpus), "--timeout", str(timeout)]
    return [sys.executable, "-c", READY_PROGRAM.read_text(), *args, "--hosts", f"{socket.gethostname()},node-b"]


def _barrier(address: str, nodes: int, gpus: int, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_barrier_argv(address, nodes, gpus, timeout), capture_output=True, text=True, timeout=120)


def test_barrier_started_before_the_head_waits_for_its_gcs() -> None:
    """The sbatch starts the barrier together with Ray: it waits for the GCS, then counts."""
    if not RAY.exists():
        unavailable("ray is not installed in this venv (extra `sandbox`)")
    port = rayhead.free_port()
    barrier = subprocess.Popen(
        _barrier_argv(f"127.0.0.1:{port}", 1, 2, 90), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1)  # the barrier is up and waiting before the head exists
    assert barrier.poll() is None
    temp = Path(tempfile.mkdtemp(prefix="rr-"))  # short: Ray's socket paths live under it
    head = rayhead.start(temp, port)
    try:
        out, err = barrier.communicate(timeout=90)
    finally:
        barrier.kill()
        _stop_head(head, temp)
    assert barrier.returncode == 0, err
    assert "joined 1/1 nodes, 2/2 GPUs" in out


def test_barrier_fails_at_the_timeout_when_no_gcs_answers() -> None:
    started = time.monotonic()
    proc = _barrier(f"127.0.0.1:{rayhead.free_port()}", 1, 2, 2)
    assert proc.returncode == 1
    assert "cannot reach this job's Ray head at 127.0.0.1:" in proc.stderr
    assert time.monotonic() - started < 30


def test_barrier_passes_when_every_node_and_gpu_joined(ray_head: str) -> None:
    proc = _barrier(ray_head, 1, 2, 60)
    assert proc.returncode == 0, proc.stderr
    assert "joined 1/1 nodes, 2/2 GPUs" in proc.stdout


def test_barrier_fails_at_the_timeout_with_the_counts(ray_head: str) -> None:
    proc = _barrier(ray_head, 2, 4, 2)
    assert proc.returncode == 1
    assert "Ray readiness timeout after 2 s: joined 1/2 nodes, 2/4 GPUs; missing: node-b" in proc.stderr


def test_the_gate_runs_in_the_barriers_process_on_its_connection(ray_head: str, tmp_path: Path) -> None:
    """`--gate MODULE ARGS`: MODULE.main(ARGS + --address) once the cluster is whole, with Ray already connected."""
    (tmp_path / "fake_gate.py").write_text(
        "import ray\n"
        "def main(argv):\n"
        "    print('PASS connected=%s argv=%s' % (ray.is_initialized(), ' '.join(argv)), flush=True)\n"
        "    return 0 if '--ok' in argv else 1\n"
    )
    program = READY_PROGRAM.read_text()
    args = ["--address", ray_head, "--nodes", "1", "--gpus", "2", "--timeout", "60", "--node-ip-address", "127.0.0.1"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def run(*gate: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", program, *args, "--gate", "fake_gate", *gate],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    passed = run("--ok", "--fabric", "none")
    assert passed.returncode == 0, passed.stderr
    assert f"PASS connected=True argv=--ok --fabric none --address {ray_head}" in passed.stdout
    assert passed.stdout.index("joined 1/1 nodes, 2/2 GPUs") < passed.stdout.index("PASS connected=True")
    failed = run("--fabric", "none")
    assert failed.returncode == 3  # the gate failed: not the barrier's 1
