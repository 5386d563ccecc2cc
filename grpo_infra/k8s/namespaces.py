"""Tenant namespaces, labelled for the queues and for Pod Security admission."""

from __future__ import annotations

from ..spec import Environment
from .labels import MANAGED_BY
from .pod_security import ENFORCE_LABEL, job_pods, loosest, pod_level
from .rayjob import ray_job

__all__ = ["MANAGED_BY", "namespace_security_level", "tenant_namespaces"]


def namespace_security_level(env: Environment) -> str:
    """The level enforced on every tenant namespace: the spec's, or the strictest the job's pods pass
    (every tenant runs the same kind of RayJob)."""
    assert env.kubernetes is not None
    if env.kubernetes.pod_security is not None:
        return env.kubernetes.pod_security
    return loosest([pod_level(pod) for pod in job_pods(ray_job(env)).values()])


def tenant_namespaces(env: Environment) -> list[dict]:
    """One Namespace per tenant, labelled so the ClusterQueue's namespaceSelector can pick them and the
    API server refuses pods weaker than the job's own."""
    level = namespace_security_level(env)
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": t.name,
                "labels": {**MANAGED_BY, "grpo-infra/tenant": t.name, ENFORCE_LABEL: level},
            },
        }
        for t in env.tenants
    ]
