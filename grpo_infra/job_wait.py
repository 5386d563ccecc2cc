"""`grpo-infra up STACK --wait`: after `pulumi up`, follow the stack's RayJob until the gang's run ends.

`pulumi up` returns once the RayJob exists (suspended until Kueue admits the whole gang); whether the run
then trains is KubeRay's status to read. This waits for a terminal deployment status (ray-operator
v1.6.2 `apis/ray/v1/rayjob_types.go` `IsJobDeploymentTerminal`: Complete, Failed). A `jobStatus` of
FAILED alone is not the end: while failures are within `backoffLimit` KubeRay sets the deployment
`Retrying` and starts a new Ray cluster. Each change of state is shown once; the RayJob and its
submitter's log are returned, whose probe lines (`job.probe`) become the placement table.

A gang that cannot go on is said in one line instead of waited out (`stuck`): a pod whose init container
failed (the image guard's FAIL line: it checks facts that will not change on a retry) or whose image
cannot be pulled, and, where the nodes are all there is (`unschedulable_after`, a rehearsal; a cloud's
autoscaler may still add the node, another job may free the quota), a pod the scheduler has not placed,
or a gang Kueue has not admitted, for that long, and (`first_failure`) an attempt that failed, since the
probe on a rehearsal's unchanging nodes fails the same way on every retry. The line names the pod, its
container, the reason and how long Kueue had held the gang's quota (or Kueue's own reason for not
admitting it), or the failed driver's last error line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .spec import Environment

Kubectl = Callable[..., str]
Say = Callable[[str], None]
FINAL_DEPLOYMENT = frozenset({"Complete", "Failed"})
# Past the job's own deadline KubeRay fails the RayJob itself (activeDeadlineSeconds); without one, a day.
NO_DEADLINE_WAIT_S = 24 * 3600
GRACE_S = 300
# A container waiting for these will not start without a change to the pod or the registry.
IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
# How long a volume of a scheduled pod may keep failing to mount before `up --wait` calls the gang stuck. The
# kubelet (kubernetes v1.36.3) retries a failed mount after 0.5 s, doubling up to 2m2s
# (pkg/util/goroutinemap/exponentialbackoff, used by pkg/volume/util/nestedpendingoperations), records each
# failure as a FailedMount event, and gives up on a pod's volumes after 2m3s with one more ("Unable to attach
# or mount volumes", pkg/kubelet/kubelet.go; `podAttachAndMountTimeout`, pkg/kubelet/volumemanager): a slow
# attach can show FailedMount for about 2 min and then mount; one still failing a minute later will not.
MOUNT_WAIT_S = 180


class WaitError(Exception):
    """The RayJob could not be read or did not end in time; the message is the one line to show."""


@dataclass(frozen=True)
class Outcome:
    job: dict[str, Any]
    log: str
    # Pod name → the node it ran on, read while the gang ran (its pods go with the cluster at the end).
    hosts: dict[str, str]

    @property
    def status(self) -> str:
        return str(self.job.get("status", {}).get("jobStatus") or self.job.get("status", {}).get("jobDeploymentStatus"))

    @property
    def succeeded(self) -> bool:
        return self.job.get("status", {}).get("jobStatus") == "SUCCEEDED"


def wait_budget(env: Environment) -> float:
    """How long a run may take: the stack's RayJob deadline plus a grace period, else a day."""
    assert env.kubernetes is not None
    deadline = env.kubernetes.ray_job.active_deadline_seconds
    return NO_DEADLINE_WAIT_S if deadline is None else deadline + GRACE_S


def _state(job: dict[str, Any]) -> str:
    status = job.get("status", {})
    parts = [status.get("jobDeploymentStatus") or ("Suspended" if job.get("spec", {}).get("suspend") else "New")]
    if status.get("jobStatus"):
        parts.append(status["jobStatus"])
    return " / ".join(parts)


def _ended(job: dict[str, Any]) -> bool:
    return job.get("status", {}).get("jobDeploymentStatus") in FINAL_DEPLOYMENT


def wait(
    env: Environment,
    kubectl: Kubectl,
    say: Say,
    timeout: float | None = None,
    poll: float = 2.0,
    unschedulable_after: float | None = None,
    first_failure: bool = False,
    once_running: Callable[[str], None] | None = None,
    release: bool = False,
    mount_after: float = MOUNT_WAIT_S,
    name: str | None = None,
) -> Outcome:
    """Until the stack's RayJob ends; each new state is said once (`Suspended`, `Initializing`, `Running / RUNNING`...).
    Raises WaitError with one line when the gang is `stuck`, and with `first_failure` (a rehearsal: the probe
    fails the same way on every retry) at the first failed attempt, with the driver's last error line.
    `once_running` is called once with the RayCluster's name when the job first runs (its head is up).
    `release`: a stuck gang's Workload is deactivated before raising (`deactivate`), so its GPUs are not held
    until waitForPodsReady gives up, once per requeue. `mount_after`: a scheduled pod whose volume has failed
    to mount for that long is stuck (`stuck_mount`). `name`: the RayJob (default the stack's own; a RayCronJob's
    run is named by its tick)."""
    ns, name = env.job.tenant, name or env.job.name
    limit = time.monotonic() + (wait_budget(env) if timeout is None else timeout)
    last = ""
    hosts: dict[str, str] = {}
    pending_since: float | None = None
    while True:
        job = json.loads(kubectl("get", "rayjob", name, "-n", ns, "-o", "json"))
        state = _state(job)
        if state != last:
            say(f"rayjob {ns}/{name}: {state}")
            last = state
        if _ended(job):
            break
        if first_failure and _attempt_failed(job):
            raise WaitError(f"rayjob {ns}/{name}: {_failed_attempt(kubectl, ns, job)}")
        pending_since = (pending_since or time.monotonic()) if state in ("New", "Suspended") else None
        if unschedulable_after is not None and pending_since and time.monotonic() - pending_since > unschedulable_after:
            raise WaitError(f"rayjob {ns}/{name}: {not_admitted(kubectl, ns, job, time.monotonic() - pending_since)}")
        cluster = job.get("status", {}).get("rayClusterName", "")
        if cluster and state.startswith(("Initializing", "Running")):
            pods = ray_pods(kubectl, ns, cluster)
            found = stuck_gang(kubectl, ns, pods, unschedulable_after, mount_after)
            if found is not None:
                line = f"rayjob {ns}/{name}: {stuck_line(kubectl, ns, found)}{held(kubectl, ns, job)}"
                raise WaitError(line + (deactivate(kubectl, ns, job) if release else ""))
            hosts |= {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
            if once_running is not None and state.startswith("Running"):
                once_running(cluster)
                once_running = None
        if time.monotonic() > limit:
            raise WaitError(f"rayjob {ns}/{name} still {state} after {timeout or wait_budget(env):.0f}s")
        time.sleep(poll)
    # The submitter's Job (KubeRay's K8sJobMode names it after the RayJob) holds `ray job submit`'s output.
    log = kubectl("logs", "-n", ns, f"job/{name}", "--tail=-1", check=False)
    return Outcome(job=job, log=log, hosts=hosts)


def _attempt_failed(job: dict[str, Any]) -> bool:
    """An attempt ended FAILED (KubeRay v1.6.2 counts it in `status.failed` before it retries)."""
    status = job.get("status", {})
    return status.get("jobStatus") == "FAILED" or int(status.get("failed") or 0) > 0


# The line of a driver's output that says why it failed: a Python exception, or a guard's refusal or FAIL line.
_ERROR_LINE = re.compile(r"^([\w.]+(Error|Exception|Exit)\b.*|refused: .*|.*\bFAIL\b.*)$")


def _failed_attempt(kubectl: Kubectl, ns: str, job: dict[str, Any]) -> str:
    """One line: the attempt failed, and the driver's last error line (or KubeRay's message when its log is gone)."""
    log = kubectl("logs", "-n", ns, f"job/{job['metadata']['name']}", "--tail=200", check=False)
    # KubeRay's message holds the driver's last logs too ("last available logs"), for when the submitter is gone.
    message = str(job.get("status", {}).get("message") or "")
    errors = [line.strip() for line in [*message.splitlines(), *log.splitlines()] if _ERROR_LINE.match(line.strip())]
    why = errors[-1] if errors else (message.splitlines() or ["no log, no message"])[0]
    return f"attempt {int(job.get('status', {}).get('failed') or 1)} failed (a rehearsal does not retry): {why}"


def ray_pods(kubectl: Kubectl, ns: str, ray_cluster: str) -> list[dict[str, Any]]:
    """The Ray cluster's pods (KubeRay labels its pods `ray.io/cluster`)."""
    pods = json.loads(kubectl("get", "pods", "-n", ns, "-l", f"ray.io/cluster={ray_cluster}", "-o", "json"))
    return list(pods.get("items", []))


@dataclass(frozen=True)
class Stuck:
    """A pod that cannot go on: which, where, and why (`container` None for a pod not scheduled)."""

    pod: str
    node: str
    container: str | None
    init: bool
    reason: str


def stuck(pods: list[dict[str, Any]], now: datetime, unschedulable_after: float | None) -> Stuck | None:
    """The first pod that cannot go on without a change, or None: an init container that exited non-zero
    (it runs the same checks on every restart), a container whose image cannot be pulled, and with
    `unschedulable_after`, a pod the scheduler has reported Unschedulable for that many seconds."""
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        name, node = meta.get("name", "?"), pod.get("spec", {}).get("nodeName") or "no node"
        for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
            for container in status.get(key) or []:
                waiting = container.get("state", {}).get("waiting") or {}
                if waiting.get("reason") in IMAGE_ERRORS:
                    reason = f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
                    return Stuck(name, node, container["name"], init, reason)
                ended = container.get("state", {}).get("terminated") or container.get("lastState", {}).get("terminated")
                if init and ended and ended.get("exitCode", 0) != 0:
                    restarts = container.get("restartCount", 0)
                    reason = f"exited {ended['exitCode']} ({ended.get('reason', 'Error')}, {restarts} restart(s))"
                    return Stuck(name, node, container["name"], init, reason)
        if unschedulable_after is None:
            continue
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                since = _age(condition.get("lastTransitionTime"), now)
                if since is not None and since >= unschedulable_after:
                    message = condition.get("message", "").strip()
                    return Stuck(name, node, None, False, f"Unschedulable for {since:.0f}s: {message}")
    return None


def stuck_gang(
    kubectl: Kubectl, ns: str, pods: list[dict[str, Any]], unschedulable_after: float | None, mount_after: float
) -> Stuck | None:
    """The first of the Ray cluster's pods that cannot go on (`stuck`), else one whose volume never mounts
    (`stuck_mount`; the events are read only while a pod is still starting)."""
    now = datetime.now(UTC)
    found = stuck(pods, now, unschedulable_after)
    if found is None and any(starting(p) for p in pods):
        found = stuck_mount(pods, failed_mounts(kubectl, ns), now, mount_after)
    return found


def starting(pod: dict[str, Any]) -> bool:
    """A pod on a node whose containers have not started (the kubelet is still setting it up)."""
    return bool(pod.get("spec", {}).get("nodeName")) and pod.get("status", {}).get("phase") == "Pending"


def failed_mounts(kubectl: Kubectl, ns: str) -> list[dict[str, Any]]:
    """The namespace's FailedMount events (the kubelet's, core/v1: `involvedObject`, `firstTimestamp`)."""
    out = kubectl("get", "events", "-n", ns, "--field-selector", "reason=FailedMount", "-o", "json", check=False)
    return list(json.loads(out or "{}").get("items", []))


def stuck_mount(pods: list[dict[str, Any]], events: list[dict[str, Any]], now: datetime, after: float) -> Stuck | None:
    """The first pod still starting whose volume has failed to mount for `after` seconds or more (its first
    FailedMount event that old), with the kubelet's message: a missing host path, NFS export or Secret does
    not appear by itself."""
    for pod in pods:
        if not starting(pod):
            continue
        meta = pod.get("metadata", {})
        for event in events:
            involved = event.get("involvedObject", {})
            if involved.get("kind") != "Pod" or involved.get("uid") != meta.get("uid"):
                continue
            since = _age(event.get("firstTimestamp") or event.get("eventTime"), now)
            if since is not None and since >= after:
                node = pod["spec"]["nodeName"]
                message = " ".join(str(event.get("message", "")).split())
                return Stuck(
                    meta.get("name", "?"), node, None, False, f"on {node}: FailedMount for {since:.0f}s: {message}"
                )
    return None


def _age(stamp: str | None, now: datetime) -> float | None:
    if not stamp:
        return None
    return (now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


def stuck_line(kubectl: Kubectl, ns: str, found: Stuck) -> str:
    """The stuck pod in one line, with its container's last log line (the guard's FAIL line) where it wrote one."""
    if found.container is None:
        return f"pod {ns}/{found.pod} {found.reason}"
    kind = "init container" if found.init else "container"
    where = f"pod {ns}/{found.pod} on {found.node}, {kind} {found.container}: {found.reason}"
    log = kubectl("logs", "-n", ns, found.pod, "-c", found.container, "--tail=20", check=False)
    lines = [line for line in log.splitlines() if line.strip()]
    failing = [line for line in lines if "FAIL" in line or "ERROR" in line] or lines
    return f"{where}: {failing[-1].strip()}" if failing else where


def job_workload(kubectl: Kubectl, ns: str, job: dict[str, Any], check: bool = False) -> dict[str, Any] | None:
    """The Kueue Workload the RayJob owns (Kueue names it; its owner reference is the RayJob), or None.
    `check`: a refused read raises (the tenant's steps) instead of reading as no Workload."""
    uid = job.get("metadata", {}).get("uid")
    workloads = json.loads(kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json", check=check) or "{}")
    for workload in workloads.get("items", []):
        if any(ref.get("uid") == uid for ref in workload.get("metadata", {}).get("ownerReferences", [])):
            return dict(workload)
    return None


def _workload_conditions(kubectl: Kubectl, ns: str, job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    workload = job_workload(kubectl, ns, job) or {}
    return {c.get("type", ""): c for c in workload.get("status", {}).get("conditions", [])}


def held(kubectl: Kubectl, ns: str, job: dict[str, Any]) -> str:
    """'; the gang's quota held Ns' since Kueue admitted the Ray object's workload, when it was."""
    admitted = _workload_conditions(kubectl, ns, job).get("Admitted", {})
    since = _age(admitted.get("lastTransitionTime"), datetime.now(UTC)) if admitted.get("status") == "True" else None
    return (
        "; the gang was not admitted"
        if since is None
        else f"; the gang's GPUs held {since:.0f}s since Kueue admitted it"
    )


# How long `deactivate` waits for Kueue to evict the deactivated Workload and free its quota.
RELEASE_S = 60
# The merge patches that stop and restart a Workload's admission (the tenant Role's one write on Workloads).
DEACTIVATE = '{"spec":{"active":false}}'
REACTIVATE = '{"spec":{"active":true}}'


def reactivate_command(ns: str, workload: str) -> str:
    """The tenant's step that lets Kueue admit a deactivated Workload again (docs/kubernetes.md)."""
    return f"kubectl -n {ns} patch workload {workload} --type merge -p '{REACTIVATE}'"


def deactivate(kubectl: Kubectl, ns: str, job: dict[str, Any]) -> str:
    """Deactivate the gang's Workload (`spec.active: false`, the one write on Workloads the tenant's Role
    grants) and wait for Kueue to evict it: a stuck gang cannot go on without a change, and otherwise Kueue holds
    its GPUs until waitForPodsReady's timeout, then admits it again after each backoff and holds them again
    (Kueue v0.19.2: a deactivated Workload is evicted with reason `Deactivated` and never requeued until it is
    active again). Returns the clause that says so, for the one line."""
    workload = job_workload(kubectl, ns, job)
    if workload is None:
        return "; no Kueue workload to release"
    wl = workload["metadata"]["name"]
    kubectl("patch", "workload", wl, "-n", ns, "--type", "merge", "-p", DEACTIVATE)
    started = time.monotonic()
    while time.monotonic() - started < RELEASE_S:
        reserved = _workload_conditions(kubectl, ns, job).get("QuotaReserved", {})
        if reserved.get("status") != "True":
            return (
                f"; workload {wl} deactivated, its GPUs released after {time.monotonic() - started:.0f}s "
                f"(after the fix: {reactivate_command(ns, wl)})"
            )
        time.sleep(1)
    return f"; workload {wl} deactivated, Kueue still held its quota after {RELEASE_S}s"


def not_admitted(kubectl: Kubectl, ns: str, job: dict[str, Any], waited: float) -> str:
    """Why Kueue has not admitted the gang, in its own words (the Workload's QuotaReserved condition)."""
    reserved = _workload_conditions(kubectl, ns, job).get("QuotaReserved", {})
    why = reserved.get("message") or "no Kueue workload for it (is the queue label right?)"
    return f"not admitted after {waited:.0f}s, and no other job holds the quota here: {why}"
