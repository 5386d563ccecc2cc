"""`grpo-infra submit STACK`: run the stack's verl command on its running RayCluster (`job.kind: raycluster`)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from .. import probe_report
from ..k8s.labels import ray_token_secret_name
from ..k8s.raycluster import DASHBOARD_PORT, head_pod_selector
from ..spec import Environment
from ..submit import SubmitRefused, follow_commands, job_logs, refusal, submit, wait_for_end
from ..submit import submission_id as new_submission_id
from .common import CHECK_FAILED, RootOption, console, fail, load, wide_console

# How long `--wait` follows one submission: a day (a RayCluster's own lifetime bounds it too).
WAIT_S = 24 * 3600
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")


def _kubectl(kubeconfig: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    config = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    try:
        return subprocess.run(["kubectl", *config, *args], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        fail("kubectl is not on PATH: submit reads the RayCluster and its token as a user does, with kubectl")


def _get(kubeconfig: Path | None, *args: str) -> dict[str, Any] | None:
    proc = _kubectl(kubeconfig, "get", *args, "-o", "json")
    if proc.returncode != 0:
        if "NotFound" in proc.stderr:
            return None
        fail(
            f"kubectl get {' '.join(args)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}"
        )
    return json.loads(proc.stdout)


@contextmanager
def _port_forward(kubeconfig: Path | None, namespace: str, service: str) -> Iterator[str]:
    """`kubectl port-forward svc/<head> :8265` on a free loopback port, for as long as the block runs."""
    config = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    command = ["kubectl", *config, "-n", namespace, "port-forward", f"svc/{service}", f":{DASHBOARD_PORT}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            match = _FORWARDING.search(line)
            if match:
                yield f"http://127.0.0.1:{match.group(1)}"
                return
            if proc.poll() is not None:
                break
        err = proc.stderr.read().strip() if proc.stderr and proc.poll() is not None else ""
        fail(f"kubectl port-forward svc/{service} did not start: {err or 'no answer in 30 s'}", CHECK_FAILED)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def submit_command(
    stack: Annotated[str, typer.Argument(help="Stack name: stacks/Pulumi.<STACK>.yaml (job.kind: raycluster).")],
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="The head's Jobs API (http://127.0.0.1:8265 after your own `kubectl port-forward`); "
            "default: submit forwards the head Service itself.",
        ),
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubectl's kubeconfig.")] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow the submission until it ends: its final status (exit 1 unless SUCCEEDED) and, for "
            "`job.probe`, where every rank ran.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Submit even while another job is PENDING or RUNNING on the cluster (both then share its GPUs).",
        ),
    ] = False,
    root: RootOption = None,
) -> None:
    """Submit STACK's verl command to its running RayCluster: prints the submission id and how to follow it;
    exit 1 when the cluster is not Ready, not admitted for this job, or already running a job (`--force`)."""
    env = load(stack, root).environment
    if env.target != "kubernetes" or env.kubernetes is None:
        fail(f"{stack} is a {env.target} stack: submit sends jobs to a Kubernetes RayCluster")
    if env.job.kind != "raycluster":
        fail(f"{stack}: job.kind is {env.job.kind}: submit sends jobs to a RayCluster (job.kind: raycluster)")
    ns, name = env.job.tenant, env.job.name
    cluster = _get(kubeconfig, "-n", ns, "raycluster", name)
    pods = _get(kubeconfig, "-n", ns, "pods", "-l", head_pod_selector(env)) or {"items": []}
    head = pods["items"][0] if pods.get("items") else None
    why = refusal(env, cluster, head)
    if why:
        fail(why, CHECK_FAILED)
    assert cluster is not None
    token = None
    if env.kubernetes.ray_job.ray_auth == "token":
        secret = _get(kubeconfig, "-n", ns, "secret", ray_token_secret_name(env))
        if secret is None or "auth_token" not in secret.get("data", {}):
            fail(f"Secret {ns}/{ray_token_secret_name(env)} with key auth_token not found", CHECK_FAILED)
        token = base64.b64decode(secret["data"]["auth_token"]).decode()
    service = cluster.get("status", {}).get("head", {}).get("serviceName") or f"{name}-head-svc"
    sid = new_submission_id(env)
    try:
        if address is not None:
            _send(env, address, token, sid, service, wait, kubeconfig, force)
        else:
            with _port_forward(kubeconfig, ns, service) as forwarded:
                _send(env, forwarded, token, sid, service, wait, kubeconfig, force)
    except SubmitRefused as exc:
        fail(str(exc), CHECK_FAILED)


def _send(
    env: Environment,
    address: str,
    token: str | None,
    sid: str,
    service: str,
    wait: bool,
    kubeconfig: Path | None,
    force: bool,
) -> None:
    """Submit, say how to follow it, and with `wait` follow it to its end here."""
    ns, name = env.job.tenant, env.job.name
    sent = submit(env, address, token, sid, force=force)
    console.print(f"submitted {sent.submission_id} to RayCluster {ns}/{name} ({sent.status})", highlight=False)
    console.print("follow its logs:", highlight=False)
    for line in follow_commands(env, sent.submission_id, service):
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    if not wait:
        return
    status = wait_for_end(address, token, sent.submission_id, timeout=WAIT_S)
    log = job_logs(address, token, sent.submission_id)
    title = f"submission {sent.submission_id} {status}"
    if probe_report.events(log):
        pods = _get(kubeconfig, "-n", ns, "pods", "-l", f"ray.io/cluster={name}") or {"items": []}
        hosts = {p["metadata"]["name"]: p["spec"].get("nodeName", "?") for p in pods["items"]}
        wide_console.print(probe_report.placement_table(f"{title}: where every rank ran", log, "pod", hosts))
    else:
        console.print(title, highlight=False)
    if status != "SUCCEEDED":
        tail = "\n".join(log.rstrip().splitlines()[-20:])
        fail(f"{title}\n{tail}", 1)
