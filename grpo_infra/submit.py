"""Sending the stack's verl command to its running RayCluster (`job.kind: raycluster`) through Ray's Jobs API.

Found the way a user finds it: the RayCluster's head Service (`status.head.serviceName`, reached with
`kubectl port-forward`) and the job's Ray token Secret, which the tenant's Role may read. What is sent is
`grpo_infra.k8s.rayjob.entrypoint(env, gate=False)`: the same verl command a RayJob runs (the gate ran
once when the cluster came up), with no `runtime_env` — the job's code is in the image, so no
`working_dir` is uploaded (Ray's upload limit, ray-project/ray#55877, cannot be hit).

Refused with one line before anything is sent: a cluster Kueue has not admitted, one not Ready (pods
starting, the fabric gate not passed), one admitted for another gang than the stack's (verl's
`trainer.nnodes`/`n_gpus_per_node` must be what the cluster has: verl cannot change the world size of a
run, volcengine/verl#2265), or one already running a job (two verl runs on one gang's GPUs run each other
out of memory; `force` sends it anyway).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from .k8s.gate import GATE_CONTAINER
from .k8s.placement import parse_quantity
from .k8s.raycluster import dashboard_token_command, head_pod_selector, worker_group_name
from .k8s.rayjob import entrypoint
from .spec import Environment

# Ray's header for a token behind a proxy that owns `Authorization` (the API server's service proxy);
# Ray 2.60 ray/_private/authentication/http_token_authentication.py reads it when `Authorization` is absent.
RAY_AUTH_HEADER = "X-Ray-Authorization"
AGENT_WAIT_S = 60
# Ray's job states (ray.job_submission.JobStatus; `is_terminal` is the final three).
ACTIVE_STATUS = frozenset({"PENDING", "RUNNING"})
FINAL_STATUS = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class SubmitRefused(Exception):
    """The one line telling why nothing was submitted."""


@dataclass(frozen=True)
class Submission:
    submission_id: str
    status: str


def submission_id(env: Environment, now: float | None = None) -> str:
    """`<job>-<UTC time>`: unique per submission, and telling which stack sent it."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{env.job.name}-{stamp}"


def refusal(env: Environment, cluster: dict[str, Any] | None, head_pod: dict[str, Any] | None) -> str | None:
    """Why the stack's job cannot be sent to this RayCluster (read from the API server), or None."""
    job = env.job
    where = f"RayCluster {job.tenant}/{job.name}"
    if job.kind != "raycluster":
        return f"job.kind is {job.kind}: `submit` sends jobs to a RayCluster (job.kind: raycluster)"
    if cluster is None:
        return f"{where} does not exist: `pulumi up` the stack first"
    spec, status = cluster.get("spec", {}), cluster.get("status", {})
    if spec.get("suspend"):
        return f"{where} is not admitted by Kueue (suspended): kubectl -n {job.tenant} get workloads"
    fit = _fit_problem(env, spec)
    if fit:
        return f"{where} {fit}"
    if head_pod is not None:
        for container in head_pod.get("status", {}).get("containerStatuses", []):
            if container.get("name") == GATE_CONTAINER and not container.get("ready"):
                pod = head_pod["metadata"]["name"]
                return (
                    f"{where} is not Ready: its fabric gate has not passed "
                    f"(kubectl -n {job.tenant} logs {pod} -c {GATE_CONTAINER})"
                )
    state = status.get("state")
    if state != "ready":
        return f"{where} is not Ready (state {state or 'none yet'}): kubectl -n {job.tenant} get pods -l grpo-infra/job={job.name}"
    ready = status.get("readyWorkerReplicas", status.get("availableWorkerReplicas", 0))
    if ready < env.job_nodes:
        return f"{where} has {ready} of {env.job_nodes} workers ready"
    return None


def _fit_problem(env: Environment, spec: dict[str, Any]) -> str | None:
    """The stack's gang against what the cluster was admitted with: the worker group's size and GPUs."""
    gang = env.gang
    group = next((g for g in spec.get("workerGroupSpecs", []) if g.get("groupName") == worker_group_name(env)), None)
    if group is None:
        return f"has no worker group {worker_group_name(env)}: the stack's pool changed since `pulumi up`"
    nodes = group.get("replicas", 0) * max(group.get("numOfHosts", 1), 1)
    resource = gang.pool.gpu.resource
    limits = group["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    gpus = int(parse_quantity(limits.get(resource, "0")))
    if (nodes, gpus) != (gang.nodes, gang.gpus_per_node):
        return (
            f"was admitted with {nodes} nodes x {gpus} GPUs, the job needs {gang.nodes} x {gang.gpus_per_node}: "
            "`pulumi up` the stack (a new cluster) before submitting it"
        )
    return None


def _request(address: str, token: str | None, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers[RAY_AUTH_HEADER] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(address.rstrip("/") + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip().splitlines()
        raise SubmitRefused(
            f"Ray Jobs API at {address}: HTTP {exc.code} {detail[-1] if detail else ''}".strip()
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise SubmitRefused(f"Ray Jobs API at {address} does not answer: {exc}") from None


def active_jobs(address: str, token: str | None) -> list[Submission]:
    """The cluster's jobs that have not ended: `GET /api/jobs/` lists every submission and every driver
    started by hand (`ray.init` in a shell on the head), each with a status, PENDING or RUNNING until it
    ends (Ray 2.60 dashboard/modules/job/job_head.py `list_jobs`, dashboard/modules/job/common.py
    `JobStatus`). A driver without a submission is named by its job id."""
    jobs = _request(address, token, "GET", "/api/jobs/") or []
    return [
        Submission(str(job.get("submission_id") or job.get("job_id")), str(job["status"]))
        for job in jobs
        if job.get("status") in ACTIVE_STATUS
    ]


def busy_refusal(env: Environment, active: list[Submission]) -> str | None:
    """The one line refusing a second job on the cluster, naming the one that runs; None when it is idle."""
    if not active:
        return None
    first, others = active[0], len(active) - 1
    more = f" (and {others} more)" if others else ""
    return (
        f"RayCluster {env.job.tenant}/{env.job.name} is already running submission {first.submission_id} "
        f"({first.status}){more}: wait for it, `ray job stop {first.submission_id}`, or --force to submit beside it"
    )


def submit(
    env: Environment, address: str, token: str | None, sid: str | None = None, force: bool = False
) -> Submission:
    """POST the job (Ray Jobs REST API, `/api/jobs/`) and read its status back; refused while another job
    is PENDING or RUNNING on the cluster unless `force`."""
    sid = sid or submission_id(env)
    busy = None if force else busy_refusal(env, active_jobs(address, token))
    if busy:
        raise SubmitRefused(busy)
    body = {
        "entrypoint": entrypoint(env, gate=False),
        "submission_id": sid,
        "metadata": {"grpo-infra/job": env.job.name},
    }
    # A head that has just come up answers 500 "No available agent" until its dashboard agent registers
    # (Ray 2.60 dashboard/modules/job/job_head.py): retried for a short while, then refused.
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            answer = _request(address, token, "POST", "/api/jobs/", body)
            break
        except SubmitRefused as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1)
    got = (answer or {}).get("submission_id", sid)
    return Submission(got, job_status(address, token, got))


def job_status(address: str, token: str | None, sid: str) -> str:
    """The Ray job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    return str(_request(address, token, "GET", f"/api/jobs/{sid}")["status"])


def wait_for_end(address: str, token: str | None, sid: str, timeout: float, poll: float = 2.0) -> str:
    """Until the submission ends (Ray's final job states, ray.job_submission.JobStatus.is_terminal); its status."""
    deadline = time.monotonic() + timeout
    while True:
        status = job_status(address, token, sid)
        if status in FINAL_STATUS:
            return status
        if time.monotonic() > deadline:
            raise SubmitRefused(f"submission {sid} still {status} after {timeout:.0f}s")
        time.sleep(poll)


def job_logs(address: str, token: str | None, sid: str) -> str:
    """The driver's whole log (`GET /api/jobs/<id>/logs`)."""
    return str((_request(address, token, "GET", f"/api/jobs/{sid}/logs") or {}).get("logs", ""))


def follow_commands(env: Environment, sid: str, service: str) -> list[str]:
    """How to follow the submission's logs, as the tenant can (its token read from the one Secret it may read)."""
    ns = env.job.tenant
    token = dashboard_token_command(env)
    auth = f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$({token}) " if token else ""
    return [
        f"kubectl -n {ns} port-forward svc/{service} 8265:8265 &",
        f"{auth}ray job logs --follow {sid} --address http://127.0.0.1:8265",
    ]


__all__ = [
    "Submission",
    "SubmitRefused",
    "active_jobs",
    "busy_refusal",
    "follow_commands",
    "head_pod_selector",
    "job_logs",
    "job_status",
    "refusal",
    "submit",
    "wait_for_end",
]
