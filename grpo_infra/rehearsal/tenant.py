"""The rehearsal as the tenant: what the docs tell a team to do, done with the team's own RBAC.

A tenant works with its namespace's `grpo-submitter` ServiceAccount, bound to the `grpo-rayjobs` Role the
stack renders (grpo_infra/k8s/access.py), never as a cluster administrator. The rehearsal follows the run
with that identity (`kubectl --as`, impersonation by the local cluster's administrator), then does the
rest of the documented steps (docs/kubernetes.md "Tenant access", "When a job fails"): read events,
reactivate the job's Kueue Workload, read the Ray token Secret of `dashboardToken`. And what the team must
not do stays refused: another tenant's namespace, listing Secrets. A documented step the Role refuses ends
the rehearsal in one line naming the step and the API server's refusal (which names the verb).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from .. import job_wait
from ..job_wait import REACTIVATE, Kubectl, Say
from ..k8s.access import TENANT_ACCOUNT
from ..k8s.labels import ray_token_secret_name
from ..kube import cluster
from ..kube.plan import KubeError, Paths
from ..spec import Environment


class TenantError(Exception):
    """A step the docs give a tenant that its Role refuses, or one it must not be allowed and is."""


@dataclass(frozen=True)
class Step:
    """One documented `kubectl` command, as the tenant runs it, and whether the Role must allow it."""

    args: tuple[str, ...]
    allowed: bool = True

    def line(self) -> str:
        return "kubectl " + " ".join(self.args)


def identity(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{TENANT_ACCOUNT}"


def tenant_kubectl(paths: Paths, namespace: str) -> Kubectl:
    """kubectl as the tenant of `namespace` (its ServiceAccount, impersonated)."""
    return functools.partial(cluster.kubectl, paths, f"--as={identity(namespace)}")


def steps(env: Environment, workload: str, run: str | None = None) -> list[Step]:
    """The documented steps after a run, and the two a tenant must be refused. `run`: the RayJob whose
    submitter's log is read (a RayCronJob's is named by its tick; a RayCluster has no submitter)."""
    ns = env.job.tenant
    out = [
        Step(("-n", ns, "get", "events")),
        Step(("-n", ns, "patch", "workload", workload, "--type", "merge", "-p", REACTIVATE)),
    ]
    if env.job.kind != "raycluster":
        out.append(Step(("-n", ns, "logs", f"job/{run or env.job.name}", "--tail=1")))
    if env.kubernetes is not None and env.kubernetes.ray_job.ray_auth == "token":
        out.append(Step(("-n", ns, "get", "secret", ray_token_secret_name(env), "-o", "name")))
    out.append(Step(("-n", ns, "get", "secrets"), allowed=False))
    out += [Step(("-n", t.name, "get", "pods"), allowed=False) for t in env.tenants if t.name != ns]
    return out


def workload_name(kubectl: Kubectl, env: Environment, run: str | None = None) -> str:
    """The name of the Kueue Workload of the job's Ray object (the RayJob `run` of a RayCronJob), read as the
    tenant."""
    ns = env.job.tenant
    kind, name = ("raycluster", env.job.name) if env.job.kind == "raycluster" else ("rayjob", run or env.job.name)
    job = json.loads(kubectl("-n", ns, "get", kind, name, "-o", "json"))
    workload = job_wait.job_workload(kubectl, ns, job, check=True)
    if workload is None:
        raise TenantError(f"as {identity(ns)}: no Kueue Workload of {kind} {ns}/{name}")
    return str(workload["metadata"]["name"])


def run_steps(env: Environment, kubectl: Kubectl, say: Say, run: str | None = None) -> None:
    """Each step as the tenant; the first that goes against the Role's promise raises TenantError."""
    ns = env.job.tenant
    for step in steps(env, workload_name(kubectl, env, run), run):
        try:
            kubectl(*step.args)
            refused = ""
        except KubeError as exc:
            refused = str(exc).rsplit(": ", 1)[-1] if "forbidden" in str(exc).lower() else ""
            if not refused:
                raise
        if step.allowed and refused:
            raise TenantError(
                f"as {identity(ns)}: `{step.line()}`, a step the docs give the tenant, refused: {refused}"
            )
        if not step.allowed and not refused:
            raise TenantError(f"as {identity(ns)}: `{step.line()}` was allowed; the tenant's Role must refuse it")
        say(f"as the tenant: {step.line()}: {'refused, as it must be' if refused else 'ok'}")
