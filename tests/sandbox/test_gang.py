"""The rendered local-slurm job on a 3-node sandbox: the gang forms, passes the fabric gate, trains,
and its Ray answers only to clients holding the job's token."""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.ports import FIXED_OFFSETS
from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan

pytestmark = pytest.mark.sandbox

# Seconds the entrypoint holds the job's Ray up for the authentication checks made from outside.
HOLD_SECONDS = 60


def _rpc(address: str, token: str | None, service: str) -> str:
    """One gRPC call to a Ray server as an outside client would make it: "OK" or the status code and details."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc, node_manager_pb2, node_manager_pb2_grpc

    metadata = [("authorization", f"Bearer {token}")] if token is not None else None
    with grpc.insecure_channel(address) as channel:
        try:
            if service == "gcs":
                reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                    gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10, metadata=metadata
                )
                return f"OK {len(reply.node_info_list)} nodes"
            node_manager_pb2_grpc.NodeManagerServiceStub(channel).GetSystemConfig(
                node_manager_pb2.GetSystemConfigRequest(), timeout=10, metadata=metadata
            )
            return "OK"
        except grpc.RpcError as err:
            return f"{err.code().name}: {err.details()}"


def _wait_for_line(job: int, pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, jobs.output(job))
        if match:
            return match
        if jobs.job_state(job) in jobs.FINAL_STATES:
            break
        time.sleep(0.2)
    raise AssertionError(f"job {job} never printed {pattern!r}:\n{jobs.output(job)[-3000:]}")


def _auth_checks(job: int, plan: Plan) -> dict[str, Any]:
    """From the host, while the entrypoint runs: who gets into this job's GCS and raylets."""
    ports = _wait_for_line(job, r"Ray ports (\d+)-\d+ \(GCS (\d+),.*head (\S+) at (\S+),", timeout=150)
    _wait_for_line(job, r"training launched", timeout=150)
    base, gcs_port, head_address = int(ports[1]), int(ports[2]), ports[4]
    gcs = f"{head_address}:{gcs_port}"
    worker = next(n for n in plan.nodes if n.address != head_address)
    raylet = f"{worker.address}:{base + FIXED_OFFSETS['node_manager']}"
    token_file = plan.ray_tmp / f"grpo-{job}" / "ray-auth-token"
    token = token_file.read_text().strip()
    status = subprocess.run(
        [str(Path(sys.executable).with_name("ray")), "status", "--address", gcs],
        env=jobs.job_environment({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return {
        "token": token,
        "token_file": token_file,
        "token_file_mode": stat.S_IMODE(token_file.stat().st_mode),
        "gcs_without_token": _rpc(gcs, None, "gcs"),
        "gcs_wrong_token": _rpc(gcs, "0" * 64, "gcs"),
        "gcs_with_token": _rpc(gcs, token, "gcs"),
        "raylet_without_token": _rpc(raylet, None, "raylet"),
        "raylet_with_token": _rpc(raylet, token, "raylet"),
        "ray_status": status,
    }


@pytest.fixture(scope="module")
def finished_job(local_sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One rendered job with the probe as entrypoint, held up for the authentication checks, run to its end."""
    workdir = tmp_path_factory.mktemp("gang")
    checkpoints = Path(local_sandbox.env.job.checkpoint.dir) / "gang"
    release = workdir / "auth-checked"
    hold = (
        f"for _ in $(seq 1 {HOLD_SECONDS * 10}); do [ -e {shlex.quote(str(release))} ] && exit 0; sleep 0.1; done; "
        "echo 'the auth checks never released the job' >&2; exit 1"
    )
    job = jobs.submit(
        local_sandbox.sbatch,
        extra_env={
            "GRPO_ENTRYPOINT": f"{jobs.probe_command(checkpoints, steps=2)} && {hold}",
            "GRPO_RAY_READY_TIMEOUT": "150",
        },
        cwd=workdir,
    )
    try:
        auth = _auth_checks(job, local_sandbox)
    finally:
        release.touch()
    state = jobs.wait_for_state(job, timeout=150, poll=0.05)
    # The moment Slurm says the job is over: nothing may still hold a file under the job's temp dirs.
    left = jobs.holders_of(local_sandbox.ray_tmp / f"grpo-{job}")
    yield {
        "left": left,
        "job": job,
        "state": state,
        "output": jobs.output(job),
        "checkpoints": checkpoints,
        "auth": auth,
        "workdir": workdir,
    }


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


def test_fabric_gate_passes_across_every_node_before_training(finished_job: dict[str, Any]) -> None:
    lines = finished_job["output"].splitlines()
    ready = max(i for i, line in enumerate(lines) if "joined 3/3 nodes, 24/24 GPUs" in line)
    verdict = next(i for i, line in enumerate(lines) if line.startswith("PASS fabric=none backend=gloo"))
    passed = [i for i, line in enumerate(lines) if "fabric gate: PASS" in line]
    launched = next(i for i, line in enumerate(lines) if "training launched" in line)
    assert len(passed) == 1 and ready < verdict < passed[0] < launched
    assert "fabric gate: PASS fabric=none backend=gloo transport=socket ranks=3 nodes=3 size=16 MiB" in lines[passed[0]]
    gate_log = finished_job["workdir"] / f"grpo-sandbox-{finished_job['job']}-gate" / "ray_allreduce.run0.log"
    assert gate_log.read_text().count("PASS fabric=none backend=gloo") == 1


def test_job_ray_refuses_clients_without_its_token(finished_job: dict[str, Any]) -> None:
    auth = finished_job["auth"]
    refused = "UNAUTHENTICATED: InvalidAuthToken: Authentication token is missing or incorrect"
    assert auth["gcs_without_token"] == refused
    assert auth["gcs_wrong_token"] == refused
    assert auth["raylet_without_token"] == refused
    # The same calls with the job's token get in: the refusals above are the token's doing.
    assert auth["gcs_with_token"] == "OK 3 nodes"
    assert auth["raylet_with_token"] == "OK"
    assert auth["token_file_mode"] == 0o600
    status = auth["ray_status"]
    assert status.returncode == 0 and "Active:" in status.stdout, status.stdout + status.stderr
    assert finished_job["state"] == "COMPLETED"


def test_token_never_reaches_the_job_output_and_goes_with_the_job(finished_job: dict[str, Any]) -> None:
    token = finished_job["auth"]["token"]
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert token not in finished_job["output"]
    assert not finished_job["auth"]["token_file"].exists()
    leaked = [
        p
        for p in finished_job["auth"]["token_file"].parent.rglob("*")
        if p.is_file() and token in p.read_text(errors="replace")
    ]
    assert leaked == [], f"Ray wrote the job's token into {leaked}"


def test_nothing_of_the_jobs_ray_is_left_on_any_node_once_completed(finished_job: dict[str, Any]) -> None:
    assert finished_job["state"] == "COMPLETED"
    # Not even Ray's retitled agents (ray::DashboardAgent, ray::RuntimeEnvAgent), which no name match finds.
    assert finished_job["left"] == {}


# What a user reading a good run must not see: Slurm's and bash's reports of killed or cancelled steps,
# errors, tracebacks, non-zero exits, terminal colour codes.
ALARMING = re.compile(
    r"error|killed|cancel|abort|traceback|exit(ed)? (with )?(exit )?(code|status) [1-9]|\bstatus 1[0-9]{2}\b|\x1b",
    re.IGNORECASE,
)


def test_a_successful_job_prints_no_error_and_ends_with_its_outcome(finished_job: dict[str, Any]) -> None:
    lines = finished_job["output"].splitlines()
    assert [line for line in lines if ALARMING.search(line)] == []
    assert re.fullmatch(rf"grpo \d\d:\d\d:\d\d \[node1\] job {finished_job['job']} outcome: success", lines[-1])
    assert sum("outcome:" in line for line in lines) == 1
    # Ray was stopped, not left to Slurm: the script said so before its outcome.
    assert re.search(r"stopped this job's Ray on 3 nodes in \d+ s", lines[-2])
