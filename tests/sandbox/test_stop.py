"""How the rendered sbatch stops one job's Ray on a node, run for real in bash (no Slurm needed).

The lifecycle's functions as the sbatch embeds them (`ray_pids_under`, `stop_ray_under`) against real processes: a process
that renamed itself the way Ray's agents do and holds a log file under the job's temp dir, one whose
command line names the dir, one that ignores TERM, and another job's process that must survive.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra.slurmgen import SBATCH_PATH, render_files
from tests.slurm.shell import functions
from tests.slurm.variants import stack

FUNCTIONS = ("log", "ray_pids_under", "still_running", "stop_ray_under")


def _functions() -> str:
    """The named functions of the rendered local-slurm sbatch, as bash source."""
    return functions(render_files(stack("local-slurm"))[SBATCH_PATH], *FUNCTIONS)


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start(spawned: list[subprocess.Popen[bytes]], script: str) -> int:
    """A process of its own session (as if re-parented away from the step): returns its pid."""
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    spawned.append(proc)
    return proc.pid


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_stop_finds_every_process_of_this_jobs_node_and_no_other(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    mine, other = tmp_path / "grpo-7" / "node1", tmp_path / "grpo-8" / "node1"
    for directory in (mine, other):
        (directory / "logs").mkdir(parents=True)
    # Like ray::DashboardAgent: a new process title, nothing of the temp dir on its command line,
    # only an open log file under it.
    agent = _start(
        spawned, f"exec 3>>{mine}/logs/agent.log; touch {tmp_path}/agent-up; exec -a ray::DashboardAgent sleep 300"
    )
    # Like raylet: the temp dir on its command line.
    raylet = _start(spawned, f"exec -a raylet python3 -c 'import time; time.sleep(300)' --temp_dir={mine}")
    # A process that ignores TERM: it must be killed after the grace, with a line naming it.
    stubborn = _start(
        spawned,
        f"trap '' TERM; exec 3>>{mine}/logs/stubborn.log; touch {tmp_path}/stubborn-up; while :; do sleep 0.1; done",
    )
    # Another job's Ray on the same node.
    neighbour = _start(spawned, f"exec 3>>{other}/logs/agent.log; exec -a ray::DashboardAgent sleep 300")
    _wait_for(tmp_path / "agent-up")
    _wait_for(tmp_path / "stubborn-up")

    found = subprocess.run(
        ["bash", "-c", f"{_functions()}\nray_pids_under {mine}"], capture_output=True, text=True, check=True
    ).stdout.split()
    # (also the stubborn loop's `sleep` children: they inherited its open log file)
    assert {agent, raylet, stubborn} <= {int(p) for p in found}
    assert neighbour not in {int(p) for p in found}

    started = time.monotonic()
    stop = subprocess.run(
        ["bash", "-c", f"{_functions()}\nstop_ray_under {mine}"],
        env={**os.environ, "GRPO_RAY_STOP_GRACE": "2", "SLURMD_NODENAME": "node1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    took = time.monotonic() - started
    time.sleep(0.2)
    assert not _alive(agent) and not _alive(raylet) and not _alive(stubborn)
    assert _alive(neighbour)
    lines = stop.stderr.splitlines()
    assert len(lines) == 1, stop.stderr
    # The stubborn shell, and the `sleep` it may be running at that instant.
    assert re.search(
        r"this job's Ray on node1: [12] process\(es\) still running 2 s after TERM \(bash( sleep)?\); killing them$",
        lines[0],
    ), lines[0]
    assert 2 <= took < 10
    os.kill(neighbour, signal.SIGKILL)


def test_a_graceful_stop_prints_nothing(tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    mine = tmp_path / "grpo-9" / "node2"
    mine.mkdir(parents=True)
    worker = _start(spawned, f"exec 3>>{mine}/worker.log; touch {tmp_path}/up; exec -a ray::IDLE sleep 300")
    _wait_for(tmp_path / "up")
    stop = subprocess.run(
        ["bash", "-c", f"{_functions()}\nstop_ray_under {mine}"], capture_output=True, text=True, timeout=30
    )
    assert stop.returncode == 0 and stop.stdout == "" and stop.stderr == ""
    time.sleep(0.1)
    assert not _alive(worker)
