"""`grpo-infra up STACK --wait`: after `pulumi up`, follow the stack's RayJob until the gang's run ends.

`pulumi up` returns once the RayJob exists (suspended until Kueue admits the whole gang); whether the run
then trains is KubeRay's status to read. This waits for a terminal deployment status (ray-operator
v1.6.2 `apis/ray/v1/rayjob_types.go` `IsJobDeploymentTerminal`: Complete, Failed). A `jobStatus` of
FAILED alone is not the end: while failures are within `backoffLimit` KubeRay sets the deployment
`Retrying` and starts a new Ray cluster. Each change of state is shown once; the RayJob and its
submitter's log are returned, whose probe lines (`job.probe`) become the placement table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .spec import Environment

Kubectl = Callable[..., str]
Say = Callable[[str], None]
FINAL_DEPLOYMENT = frozenset({"Complete", "Failed"})
# Past the job's own deadline KubeRay fails the RayJob itself (activeDeadlineSeconds); without one, a day.
NO_DEADLINE_WAIT_S = 24 * 3600
GRACE_S = 300


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


def wait(env: Environment, kubectl: Kubectl, say: Say, timeout: float | None = None, poll: float = 2.0) -> Outcome:
    """Until the stack's RayJob ends; each new state is said once (`Suspended`, `Initializing`, `Running / RUNNING`...)."""
    ns, name = env.job.tenant, env.job.name
    limit = time.monotonic() + (wait_budget(env) if timeout is None else timeout)
    last = ""
    hosts: dict[str, str] = {}
    while True:
        job = json.loads(kubectl("get", "rayjob", name, "-n", ns, "-o", "json"))
        state = _state(job)
        if state != last:
            say(f"rayjob {ns}/{name}: {state}")
            last = state
        if _ended(job):
            break
        if job.get("status", {}).get("jobStatus") == "RUNNING":
            hosts |= _pod_hosts(kubectl, ns, job["status"].get("rayClusterName", ""))
        if time.monotonic() > limit:
            raise WaitError(f"rayjob {ns}/{name} still {state} after {timeout or wait_budget(env):.0f}s")
        time.sleep(poll)
    # The submitter's Job (KubeRay's K8sJobMode names it after the RayJob) holds `ray job submit`'s output.
    log = kubectl("logs", "-n", ns, f"job/{name}", "--tail=-1", check=False)
    return Outcome(job=job, log=log, hosts=hosts)


def _pod_hosts(kubectl: Kubectl, ns: str, ray_cluster: str) -> dict[str, str]:
    """The Ray cluster's pods and their nodes (KubeRay labels its pods `ray.io/cluster`)."""
    if not ray_cluster:
        return {}
    pods = json.loads(kubectl("get", "pods", "-n", ns, "-l", f"ray.io/cluster={ray_cluster}", "-o", "json"))
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "?") for p in pods.get("items", [])}
