"""`grpo-infra submit`: the stack's verl command sent through Ray's Jobs API to a real Ray head with token
authentication (started here: on the local cluster's fake nodes no Ray runs), its id and status read back;
and the refusals, judged on RayCluster objects as the API server returns them."""

from __future__ import annotations

import base64
import copy
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from grpo_infra import k8s as render
from grpo_infra import training
from grpo_infra.cli import app
from grpo_infra.cli.common import CHECK_FAILED
from grpo_infra.k8s.gate import GATE_CONTAINER, GATE_PASSED
from grpo_infra.k8s.rayjob import entrypoint
from grpo_infra.k8s.shipped import RESUME_FILE, RESUME_MOUNT
from grpo_infra.preflight.gate import MODULE
from grpo_infra.spec import Environment
from grpo_infra.submit import SubmitRefused, active_jobs, job_status, refusal, submit
from tests import rayhead
from tests.conftest import ROOT, unavailable

from .conftest import env_of, variant

RAY = Path(sys.executable).with_name("ray")


@dataclass(frozen=True)
class Head:
    address: str
    token: str
    calls: Path
    gate_exit: Path


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A real Ray head requiring a token (`RAY_AUTH_MODE=token`), whose `python3` records what the job ran."""
    if not RAY.exists():
        unavailable("ray is not installed in this venv")
    where = tmp_path_factory.mktemp("submit-head")
    bin_dir, temp = where / "bin", Path(f"/tmp/rs-head-{os.getpid()}-{where.name}")
    bin_dir.mkdir()
    calls = where / "calls.jsonl"
    gate_exit = where / "gate-exit"
    gate_exit.write_text("0")
    (bin_dir / "python3").write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"sys.exit(int(open({str(gate_exit)!r}).read()) if sys.argv[1:3] == ['-m', {MODULE!r}] else 0)\n"
    )
    (bin_dir / "python3").chmod(0o755)
    token = secrets.token_urlsafe(24)
    dashboard = rayhead.free_port()
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
    }
    ports = {
        "port": rayhead.free_port(),
        "dashboard-port": dashboard,
        "dashboard-agent-listen-port": rayhead.free_port(),
        "dashboard-agent-grpc-port": rayhead.free_port(),
        "ray-client-server-port": rayhead.free_port(),
        "metrics-export-port": rayhead.free_port(),
        "runtime-env-agent-port": rayhead.free_port(),
    }
    url = f"http://127.0.0.1:{dashboard}"
    # Ray gives its raylet 30 s to register (ray/_private/node.py); on a loaded machine a start can miss
    # that and the head exits: started again, up to three times.
    for _attempt in range(3):
        process = subprocess.Popen(
            [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--temp-dir={temp}", "--disable-usage-stats",
             *(f"--{k}={v}" for k, v in ports.items())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
        if _up(url, token, process):
            break
        _stop(process)
    else:
        pytest.fail("the Ray head did not come up in three tries")
    try:
        _wait_for_agent(url, token)
        yield Head(url, token, calls, gate_exit)
    finally:
        _stop(process)
        shutil.rmtree(temp, ignore_errors=True)


def _up(url: str, token: str, process: subprocess.Popen[bytes]) -> bool:
    """The head's job server answers (with the token) while its process lives."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            request = urllib.request.Request(f"{url}/api/version", headers={"Authorization": f"Bearer {token}"})
            urllib.request.urlopen(request, timeout=2).close()
            time.sleep(3)
            return process.poll() is None
        except OSError:
            time.sleep(0.5)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    rayhead.stop(process)


def _post(url: str, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read()))


def _wait_for_agent(url: str, token: str) -> None:
    """Until the head's dashboard agent takes jobs (a trivial one, which runs no python3), and that job has
    ended: the tests start on an idle cluster, as `submit` wants it."""
    deadline = time.monotonic() + 240
    while True:
        try:
            sid = _post(url, token, "/api/jobs/", {"entrypoint": "true"})["submission_id"]
            break
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail("the Ray head's agent took no job within 240 s")
            time.sleep(1)
    while job_status(url, token, sid) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        if time.monotonic() > deadline:
            pytest.fail(f"the agent's first job {sid} did not end within 240 s")
        time.sleep(0.5)


def raycluster(tmp: Path, *changes: Any) -> Environment:
    def change(raw: dict[str, Any]) -> None:
        raw["job"]["kind"] = "raycluster"
        raw["job"]["checkpoint"]["dir"] = str(tmp / "ckpt")

    return variant("eks-prod", change, *changes)


def _finished(head: Head, sid: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = job_status(head.address, head.token, sid)
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"{sid} did not finish within 120 s")


def test_a_submission_runs_the_stacks_verl_command_and_its_status_is_read_back(head: Head, tmp_path: Path) -> None:
    env = raycluster(tmp_path)
    head.calls.unlink(missing_ok=True)
    sent = submit(env, head.address, head.token)
    assert sent.submission_id.startswith(f"{env.job.name}-")
    assert sent.status in ("PENDING", "RUNNING", "SUCCEEDED")
    assert _finished(head, sent.submission_id) == "SUCCEEDED"
    runs = [json.loads(line) for line in head.calls.read_text().splitlines()]
    # verl under the resume rule, run from the head's shipped ConfigMap with the submitted job's own identity.
    assert [r[:2] for r in runs] == [[f"{RESUME_MOUNT}/{RESUME_FILE}", "--checkpoint-dir"]], (
        "verl alone under the resume rule: the gate ran when the cluster came up"
    )
    rule, verl_argv = runs[0][: runs[0].index("--")], runs[0][runs[0].index("--") + 2 :]
    assert json.loads(rule[rule.index("--identity") + 1]) == training.experiment_identity(env)
    assert verl_argv[:2] == ["-m", "verl.trainer.main_ppo"]
    assert "trainer.nnodes=4" in verl_argv and "trainer.n_gpus_per_node=8" in verl_argv
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{head.address}/api/jobs/{sent.submission_id}", headers={"X-Ray-Authorization": f"Bearer {head.token}"}
        )
    ) as answer:
        details = json.loads(answer.read())
    assert details["entrypoint"] == entrypoint(env, gate=False)
    assert not details.get("runtime_env"), "nothing uploaded: the code is in the image"


def test_job_debug_applies_on_this_path(head: Head, tmp_path: Path) -> None:
    env = raycluster(tmp_path, lambda raw: raw["job"].update(debug={"rayDebugger": "postMortem"}))
    head.calls.unlink(missing_ok=True)
    sent = submit(env, head.address, head.token)
    _finished(head, sent.submission_id)
    runs = [json.loads(line) for line in head.calls.read_text().splitlines()]
    assert runs[0][0] == "-c" and "debugpy" in runs[0][1], "the debugpy check runs first, as in a RayJob"
    cluster = render.ray_cluster(env)
    head_env = {
        e["name"]: e.get("value") for e in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert head_env.get("RAY_DEBUG_POST_MORTEM") == "1", "the cluster's Ray carries the debugger switch"


def test_a_wrong_token_is_refused_in_one_line(head: Head, tmp_path: Path) -> None:
    with pytest.raises(SubmitRefused, match="HTTP 403 Forbidden: Invalid authentication token") as refused:
        submit(raycluster(tmp_path), head.address, "not-the-token")
    assert "\n" not in str(refused.value)


def _admitted(env: Environment, replicas: int | None = None, state: str = "ready") -> dict[str, Any]:
    """The RayCluster as the API server returns it once Kueue admitted it (suspend gone) and KubeRay
    reported its state (field names of ray.io/v1 RayClusterStatus)."""
    cluster = copy.deepcopy(render.ray_cluster(env))
    cluster["spec"].pop("suspend")
    if replicas is not None:
        cluster["spec"]["workerGroupSpecs"][0]["replicas"] = replicas
    nodes = cluster["spec"]["workerGroupSpecs"][0]["replicas"]
    cluster["status"] = {
        "state": state,
        "readyWorkerReplicas": nodes,
        "head": {"serviceName": f"{env.job.name}-head-svc"},
    }
    return cluster


def _head_pod(gate_ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "grpo-head-abcde"},
        "status": {
            "containerStatuses": [{"name": "ray-head", "ready": True}, {"name": GATE_CONTAINER, "ready": gate_ready}]
        },
    }


def test_refusals_before_anything_is_sent(tmp_path: Path) -> None:
    env = raycluster(tmp_path)
    assert refusal(env, _admitted(env), _head_pod(True)) is None
    assert "does not exist" in refusal(env, None, None)
    assert "not admitted" in refusal(env, render.ray_cluster(env), None)
    assert "fabric gate has not passed" in refusal(env, _admitted(env), _head_pod(False))
    assert "not Ready" in refusal(env, _admitted(env, state="suspended"), _head_pod(True))
    smaller = refusal(env, _admitted(env, replicas=2), _head_pod(True))
    assert "admitted with 2 nodes x 8 GPUs, the job needs 4 x 8" in smaller
    rayjob = variant("eks-prod", lambda raw: None)
    assert "`submit` sends jobs to a RayCluster" in refusal(rayjob, None, None)


def test_the_command_refuses_a_stack_that_is_not_a_raycluster() -> None:
    result = CliRunner().invoke(app, ["submit", "eks-prod", "--root", str(ROOT)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "job.kind is rayjob" in result.output


@pytest.mark.parametrize("verdict", [0, 1])
def test_the_raycluster_gate_container_marks_the_head_ready_only_when_the_gate_passes(
    head: Head, tmp_path: Path, verdict: int
) -> None:
    """The `fabric-gate` container's own script, run against the real head's Jobs API as it runs beside the
    head (RAY_ADDRESS on loopback, the token from the environment): the readiness file appears only after
    a passing verdict; a failing one prints FAIL and leaves the head not Ready."""
    env = raycluster(tmp_path)
    container = next(
        c for c in render.ray_cluster(env)["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
        if c["name"] == GATE_CONTAINER
    )  # fmt: skip
    passed = tmp_path / "passed"
    script = container["command"][-1].replace(GATE_PASSED, str(passed))
    head.gate_exit.write_text(str(verdict))
    head.calls.unlink(missing_ok=True)
    shell_env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "RAY_ADDRESS": head.address,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": head.token,
    }
    log = tmp_path / "gate.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT, env=shell_env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not passed.exists() and "FAIL fabric gate" not in log.read_text():
            time.sleep(0.5)
        runs = [json.loads(line) for line in head.calls.read_text().splitlines()] if head.calls.exists() else []
        assert [r[:2] for r in runs] == [["-m", MODULE]], log.read_text()
        if verdict == 0:
            assert passed.exists(), log.read_text()
        else:
            time.sleep(2)
            assert not passed.exists() and "FAIL fabric gate" in log.read_text(), log.read_text()
        assert proc.poll() is None, "the container stays up (its readiness tells the verdict)"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_the_submitters_liveness_probe_passes_while_the_head_answers_and_fails_once_it_is_gone(head: Head) -> None:
    """The rendered probe, run against a real head with token auth on (`/api/gcs_healthz` needs no token),
    against a closed port, and against a peer that never answers (a head whose node vanished resets
    nothing): the last two fail within the probe's own timeout, and only they."""
    pod = render.ray_job(env_of("local-k8s"))["spec"]["submitterPodTemplate"]["spec"]
    probe = pod["containers"][0]["livenessProbe"]
    program, *args = probe["exec"]["command"]
    assert program == "python3"

    def run(address: str) -> int:
        env = {"PATH": "/usr/bin:/bin", "RAY_DASHBOARD_ADDRESS": address}
        timeout = probe["timeoutSeconds"]
        return subprocess.run([sys.executable, *args], env=env, capture_output=True, timeout=timeout).returncode

    # KubeRay sets `host:port`, without a scheme (v1.6.2 configureSubmitterContainer).
    assert run(head.address.removeprefix("http://")) == 0
    assert run(head.address) == 0
    assert run(f"127.0.0.1:{rayhead.free_port()}") != 0
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nothing ever reads or answers
        assert run(f"127.0.0.1:{silent.getsockname()[1]}") != 0


@contextmanager
def _running(head: Head, entrypoint: str) -> Iterator[str]:
    """A job on the head that runs until stopped (`POST /api/jobs/<id>/stop` at the end), once it RUNS."""
    sid = f"long-{secrets.token_hex(4)}"
    _post(head.address, head.token, "/api/jobs/", {"entrypoint": entrypoint, "submission_id": sid})
    try:
        deadline = time.monotonic() + 60
        while job_status(head.address, head.token, sid) != "RUNNING":
            assert time.monotonic() < deadline, f"{sid} did not start within 60 s"
            time.sleep(0.5)
        yield sid
    finally:
        _post(head.address, head.token, f"/api/jobs/{sid}/stop", {})
        assert _finished(head, sid) in ("STOPPED", "FAILED", "SUCCEEDED")


def test_a_second_job_is_refused_in_one_line_while_one_runs_and_force_sends_it(head: Head, tmp_path: Path) -> None:
    env = raycluster(tmp_path)
    with _running(head, "sleep 30") as first:
        assert [(j.submission_id, j.status) for j in active_jobs(head.address, head.token)] == [(first, "RUNNING")]
        with pytest.raises(SubmitRefused) as refused:
            submit(env, head.address, head.token)
        line = str(refused.value)
        assert "\n" not in line and f"running submission {first} (RUNNING)" in line and "--force" in line
        forced = submit(env, head.address, head.token, sid=f"forced-{secrets.token_hex(4)}", force=True)
        assert forced.status in ("PENDING", "RUNNING", "SUCCEEDED")
        assert _finished(head, forced.submission_id) == "SUCCEEDED"
    assert active_jobs(head.address, head.token) == [], "idle again: the next submission goes through"


def test_the_command_refuses_a_busy_cluster_and_force_overrides_it(
    head: Head, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`grpo-infra submit STACK --address URL` against the real head, the RayCluster, its head pod and the
    token Secret answered as kubectl returns them for an admitted, Ready cluster."""
    env = raycluster(tmp_path)
    cli = importlib.import_module("grpo_infra.cli.submit")
    answers = {
        "raycluster": _admitted(env),
        "pods": {"items": [_head_pod(True)]},
        "secret": {"data": {"auth_token": base64.b64encode(head.token.encode()).decode()}},
    }
    monkeypatch.setattr(cli, "load", lambda stack, root: SimpleNamespace(environment=env))
    monkeypatch.setattr(cli, "_get", lambda kubeconfig, *args: answers[args[2]])
    command = ["submit", "eks-prod", "--address", head.address]
    with _running(head, "sleep 30") as first:
        refused = CliRunner().invoke(app, command)
        assert refused.exit_code == CHECK_FAILED, refused.output
        assert refused.output.strip().count("\n") == 0 and f"running submission {first}" in refused.output
        forced = CliRunner().invoke(app, [*command, "--force"])
        assert forced.exit_code == 0, forced.output
        sid = forced.output.split("submitted ", 1)[1].split()[0]
        assert _finished(head, sid) == "SUCCEEDED"
