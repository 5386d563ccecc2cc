"""The `ray` launcher for real: head.sh and worker.sh on the sandbox's machines (network namespaces),
the readiness line, submit.sh through the Jobs API, a stop that leaves nothing behind, and two
clusters on the same machines side by side."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra import synth
from grpo_infra.launchers import ray as ray_launcher
from grpo_infra.ports import MIN_BLOCK_SIZE, ray_ports
from grpo_infra.sandbox.plan import Plan
from tests.sandbox.nodes import BIN, CHECK_GANG, in_node_command, ray_processes

pytestmark = pytest.mark.sandbox

# Polls one submission through the Jobs API until it is final; prints {"status", "logs"}.
JOBS_API = """
import json, sys, time
from ray.job_submission import JobStatus, JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[3])
status = client.get_job_status(sys.argv[2])
while not status.is_terminal() and time.monotonic() < deadline:
    time.sleep(1)
    status = client.get_job_status(sys.argv[2])
print(json.dumps({"status": status.value, "logs": client.get_job_logs(sys.argv[2])}))
"""


def _in_node(plan: Plan, name: str, argv: list[str], env: dict[str, str], timeout: float = 180) -> str:
    """Run a rendered script on one sandbox machine (its network and host name), return its output."""
    proc = subprocess.run(
        in_node_command(plan, name, argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} on {name} exited {proc.returncode}:\n{out[-4000:]}")
    return out


def _environment(plan: Plan, run: int) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/root"),
        "GRPO_RUN_ID": str(run),
        "GRPO_NUM_GPUS": "8",
        "GRPO_RAY_TMPDIR": str(plan.ray_tmp),
        "GRPO_RAY_READY_TIMEOUT": "120",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


@pytest.fixture(scope="module")
def scripts(local_sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack's rendered `ray/` folder (what `synth` writes), on the shared file system."""
    where = tmp_path_factory.mktemp("rendered")
    files = ray_launcher.render_files(local_sandbox.env)
    synth.write_tree(files, where / "local-slurm")
    return where / "local-slurm" / "ray"


class Cluster:
    """One run of the manual launcher on the sandbox's three machines."""

    def __init__(self, plan: Plan, scripts: Path, run: int) -> None:
        self.plan, self.scripts, self.run = plan, scripts, run
        self.env = _environment(plan, run)
        self.root = plan.ray_tmp / f"grpo-ray-{run}"
        self.head = plan.nodes[0]

    def start(self) -> str:
        out = _in_node(self.plan, "node1", [str(self.scripts / "head.sh"), "start"], self.env)
        for node in self.plan.nodes[1:]:
            out += _in_node(
                self.plan, node.name, [str(self.scripts / "worker.sh"), "start", self.head.address], self.env
            )
        return out

    def wait(self) -> str:
        return _in_node(self.plan, "node1", [str(self.scripts / "head.sh"), "wait"], self.env)

    def submit(self, workdir: Path, entrypoint: str) -> tuple[str, str]:
        env = {**self.env, "GRPO_WORKING_DIR": str(workdir), "GRPO_ENTRYPOINT": entrypoint}
        out = _in_node(self.plan, "node1", [str(self.scripts / "submit.sh")], env, timeout=300)
        match = re.search(r"grpo: submitted (\S+) to ", out)
        assert match, out
        return match[1], out

    def stop(self) -> None:
        for node in self.plan.nodes[1:]:
            _in_node(self.plan, node.name, [str(self.scripts / "worker.sh"), "stop"], self.env)
        _in_node(self.plan, "node1", [str(self.scripts / "head.sh"), "stop"], self.env)

    def dashboard(self) -> str:
        ports = ray_ports(30000, 32767, self.run, MIN_BLOCK_SIZE)
        return f"http://{self.head.address}:{ports.dashboard}"

    def final_status(self, submission: str, timeout: float = 300) -> tuple[str, str]:
        """The job's final status and logs, read through the Jobs API with this run's token (in a
        process of its own: Ray reads RAY_AUTH_MODE once per process)."""
        token_file = self.root / "ray-auth-token"
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
        proc = subprocess.run(
            [sys.executable, "-c", JOBS_API, self.dashboard(), submission, str(timeout)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        return result["status"], result["logs"]


@pytest.fixture
def gang_check(tmp_path: Path) -> Path:
    (tmp_path / "check_gang.py").write_text(CHECK_GANG, encoding="utf-8")
    return tmp_path


@pytest.fixture
def clusters(local_sandbox: Plan, scripts: Path) -> Iterator[list[Cluster]]:
    made: list[Cluster] = []
    yield made
    for cluster in made:
        with contextlib.suppress(AssertionError):
            cluster.stop()


def test_manual_cluster_runs_the_job_and_stops_clean(
    local_sandbox: Plan, scripts: Path, gang_check: Path, clusters: list[Cluster]
) -> None:
    cluster = Cluster(local_sandbox, scripts, run=3)
    clusters.append(cluster)
    started = cluster.start()
    assert "Ray head of run 3 at 10." in started
    ready = cluster.wait()
    assert "grpo: joined 3/3 nodes, 24/24 GPUs" in ready
    assert "ray cluster ready: 3 nodes, 24 GPUs" in ready
    # The dashboard (the Jobs API) listens on the interface's address in run 3's block, not on every
    # interface. (GCS and raylets bind every interface whatever Ray is told: the token guards them.)
    dashboard = ray_ports(30000, 32767, 3, MIN_BLOCK_SIZE).dashboard
    listening = subprocess.run(
        ["nsenter", f"--net=/run/netns/{local_sandbox.nodes[0].namespace}", "ss", "-ltnH"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert f"{local_sandbox.nodes[0].address}:{dashboard}" in listening
    assert f"0.0.0.0:{dashboard}" not in listening and f"*:{dashboard}" not in listening

    submission, out = cluster.submit(gang_check, "python3 check_gang.py")
    assert f"ray job logs --address {cluster.dashboard()} --follow {submission}" in out
    status, logs = cluster.final_status(submission)
    assert status == "SUCCEEDED", logs
    # The run's token: readable by its owner only, and in no output, log or rendered file.
    token_file = cluster.root / "ray-auth-token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    token = token_file.read_text().strip()
    assert len(token) == 64
    for text in (started, ready, out, logs, *(p.read_text() for p in scripts.iterdir() if p.is_file())):
        assert token not in text
    assert "PASS" in logs  # the fabric gate ran before the entrypoint
    assert "check-gang: 3 nodes, 24 GPUs" in logs
    assert "gpus per host [8, 8, 8]" in logs

    assert ray_processes(cluster.root), "the cluster should be running before stop"
    cluster.stop()
    clusters.remove(cluster)
    assert ray_processes(cluster.root) == []
    assert not (cluster.root / "ray-auth-token").exists()


def test_two_clusters_on_the_same_machines_do_not_clash(
    local_sandbox: Plan, scripts: Path, gang_check: Path, clusters: list[Cluster]
) -> None:
    first, second = Cluster(local_sandbox, scripts, run=1), Cluster(local_sandbox, scripts, run=2)
    clusters += [first, second]
    first.start()
    second.start()
    assert "24/24 GPUs" in first.wait()
    assert "24/24 GPUs" in second.wait()
    # A third head on a run id whose block is taken is refused, and leaves the running one alone.
    with pytest.raises(AssertionError, match="is taken: another cluster uses run 1's port block"):
        _in_node(local_sandbox, "node1", [str(scripts / "head.sh"), "start"], first.env)
    sub1, _ = first.submit(gang_check, "python3 check_gang.py")
    sub2, _ = second.submit(gang_check, "python3 check_gang.py")
    assert first.final_status(sub1)[0] == "SUCCEEDED"
    assert second.final_status(sub2)[0] == "SUCCEEDED"
    first.stop()
    clusters.remove(first)
    assert ray_processes(first.root) == []
    # Stopping run 1 stopped nothing of run 2: still whole.
    assert "24/24 GPUs" in second.wait()
    assert len(ray_processes(second.root)) > 0
    second.stop()
    clusters.remove(second)
    assert ray_processes(second.root) == []


def test_readiness_wait_fails_with_the_count_when_workers_are_missing(
    local_sandbox: Plan, scripts: Path, clusters: list[Cluster]
) -> None:
    cluster = Cluster(local_sandbox, scripts, run=4)
    clusters.append(cluster)
    _in_node(local_sandbox, "node1", [str(scripts / "head.sh"), "start"], cluster.env)
    env = {**cluster.env, "GRPO_RAY_READY_TIMEOUT": "5"}
    with pytest.raises(AssertionError) as failed:
        _in_node(local_sandbox, "node1", [str(scripts / "head.sh"), "wait"], env)
    assert "joined 1/3 nodes, 8/24 GPUs" in str(failed.value)
    assert "not every node and GPU joined Ray" in str(failed.value)
    _in_node(local_sandbox, "node1", [str(scripts / "head.sh"), "stop"], cluster.env)
    clusters.remove(cluster)
    assert ray_processes(cluster.root) == []
