"""A worker joins even when the head's GCS stalls while it starts (a loaded head machine, many nodes joining at
once): Ray's own `ray start` gives up after a few seconds, the lifecycle starts it again until the readiness
deadline. Run for real on the sbatch's node (`run_ray_node`, blocking) and on the launchers' nodes
(`grpo_start_ray`), against a real Ray head whose GCS is stopped (SIGSTOP) for
longer than Ray's start waits, from the moment the worker's raylet runs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from grpo_infra.lifecycle import ray_node
from grpo_infra.ports import ray_ports
from grpo_infra.spec.slurm import PortRange
from tests import rayhead
from tests.conftest import unavailable
from tests.slurm.variants import stack

LIBRARY = ("# --- grpo ray lifecycle", "# --- end grpo ray lifecycle ---")
LAUNCHER = ("# --- grpo launcher node", "# --- end grpo launcher node ---")
STALL_S = 32.0
# The head's own raylet must outlive the stall, as a real overloaded head's does: it gives up on its GCS after
# gcs_rpc_server_reconnect_timeout_s (60 s in Ray 2.60's ray_config_def.h), which a loaded test machine can
# reach with the 32 s stall and a slow restart; the GCS's health checks of the nodes are stopped with it.
HEAD_CONFIG = {"RAY_gcs_rpc_server_reconnect_timeout_s": "600"}
# The worker's readiness deadline, within which it starts Ray again after each give-up, and so how long the
# barrier waits for it: one give-up (Ray's own wait for its raylet to register, 30 s and more on a loaded
# machine), the pause and a second start fit only in the whole deadline, not in a shorter barrier.
READY_S = 120


def _block(script: str, markers: tuple[str, str]) -> str:
    start = script.index(markers[0])
    return script[start : script.index(markers[1], start)]


def _paths() -> dict[str, tuple[str, PortRange, int]]:
    """Each path's worker start, as a bash program ending in a call with $TEMP, $RUN, $GPUS, its port range
    and the pool's block size."""
    from grpo_infra.launchers import render_files as launcher_files
    from grpo_infra.slurmgen import SBATCH_PATH
    from grpo_infra.slurmgen import render_files as slurm_files

    local, eks = stack("local-slurm"), stack("eks-prod")
    assert local.slurm and eks.launchers and eks.launchers.dstack
    sbatch = slurm_files(local)[SBATCH_PATH]
    dstack = yaml.safe_load(launcher_files(eks)["dstack/task.dstack.yml"])["commands"][0]
    return {
        "sbatch (run_ray_node)": (
            _block(sbatch, LIBRARY)
            + 'ray_port_block "$RUN"\nrun_ray_node worker 127.0.0.1 "$TEMP" "" "$GPUS" 127.0.0.1\n',
            local.slurm.ray_ports,
            local.gang.pool.ray_block_size,
        ),
        "dstack (grpo_start_ray)": (
            _block(dstack, LIBRARY)
            + _block(dstack, LAUNCHER)
            + 'ray_port_block "$RUN"\ngrpo_start_ray worker 127.0.0.1 "$TEMP" "$GPUS" 127.0.0.1 || exit 1\n',
            eks.launchers.dstack.ray_ports,
            eks.gang.pool.ray_block_size,
        ),
    }


PATHS = _paths()


def _free_run(ports: PortRange, size: int) -> tuple[int, int]:
    """A run id whose GCS port nothing on this machine holds now, and that port."""
    for run in range(7, 200):
        gcs = ray_ports(ports.start, ports.end, run, size).gcs
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", gcs))
            except OSError:
                continue
            return run, gcs
    pytest.fail("no run of the stack's port range has a free GCS port here")


def _pids(needle: str) -> list[int]:
    """Live processes whose command line holds `needle`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmdline:
                found.append(int(entry))
    return found


def _logs(worker_temp: Path, head_temp: Path) -> str:
    """The worker's `ray start` output and the end of the head's logs, to say why a start failed."""
    logs = [worker_temp / "ray-start.log", *sorted((head_temp / "session_latest" / "logs").glob("*.err"))]
    return "\n".join(f"{log}:\n{log.read_text(errors='replace')[-1500:]}" for log in logs if log.exists())


def _joined(address: str, nodes: int, gpus: int) -> subprocess.CompletedProcess[str]:
    """The product's readiness barrier: every node and GPU joined the head at `address`."""
    argv = [sys.executable, str(ray_node.READY_PROGRAM), "--address", address, "--nodes", str(nodes)]
    argv += ["--gpus", str(gpus), "--timeout", str(READY_S)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=READY_S + 60)


@pytest.mark.parametrize("path", PATHS)
def test_a_worker_joins_a_head_whose_gcs_stalls_while_it_starts(path: str) -> None:
    if not rayhead.RAY.exists():
        unavailable("ray is not installed in this venv (extra `sandbox`)")
    program, ports, size = PATHS[path]
    run, gcs_port = _free_run(ports, size)
    # Short temp dirs: Ray's socket paths under them must fit AF_UNIX's 107 bytes.
    tmp_path = Path(tempfile.mkdtemp(prefix="grpo-join-"))
    head_temp, worker_temp = tmp_path / "h", tmp_path / "w"
    head = rayhead.start(head_temp, gcs_port, gpus=2, config=HEAD_CONFIG, block=False)
    env = {
        **os.environ,
        "PATH": f"{rayhead.RAY.parent}:{os.environ['PATH']}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "GRPO_RAY_READY_TIMEOUT": str(READY_S),
        "TEMP": str(worker_temp),
        "RUN": str(run),
        "GPUS": "2",
    }
    worker = None
    try:
        deadline = time.monotonic() + 240
        while not (gcs := [p for p in _pids("gcs_server") if p in _pids(str(head_temp))]):
            assert time.monotonic() < deadline and head.poll() in (None, 0), "the Ray head did not start"
            time.sleep(0.2)
        time.sleep(2)  # the head's own raylet registers
        worker = subprocess.Popen(
            ["bash", "-c", program], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        while not [p for p in _pids("raylet/raylet") if p in _pids(str(worker_temp))]:
            if worker.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                output = worker.communicate()[0][-3000:]
                pytest.fail(f"the worker's raylet never started:\n{output}\n{_logs(worker_temp, head_temp)}")
            time.sleep(0.05)
        # Longer than every wait of Ray's start: its raylet's 30 s to register included.
        try:
            os.kill(gcs[0], signal.SIGSTOP)
        except ProcessLookupError:
            pytest.fail("the head's GCS ended before the stall:\n" + _logs(worker_temp, head_temp))
        try:
            time.sleep(STALL_S)
        finally:
            try:
                os.kill(gcs[0], signal.SIGCONT)
            except ProcessLookupError:
                pytest.fail("the head's GCS was killed while stopped:\n" + _logs(worker_temp, head_temp))
        joined = _joined(f"127.0.0.1:{gcs_port}", nodes=2, gpus=4)
        if path.startswith("sbatch") and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)  # run_ray_node blocks: TERM stops its Ray, ends it without error
        output = worker.communicate(timeout=120)[0]  # grpo_start_ray returns once its `ray start` has
        assert joined.returncode == 0, output[-3000:] + joined.stdout + joined.stderr
        assert "stopped while it joined (" in output and "starting again" in output, output[-3000:]
        assert worker.returncode == 0, output[-3000:]
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        for pid in _pids(str(worker_temp)):
            os.kill(pid, signal.SIGKILL)
        rayhead.stop(head)
        shutil.rmtree(tmp_path, ignore_errors=True)
