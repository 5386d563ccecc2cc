"""Tenant namespaces."""

from __future__ import annotations

from ..spec import Environment

MANAGED_BY = {"app.kubernetes.io/managed-by": "grpo-infra"}


def tenant_namespaces(env: Environment) -> list[dict]:
    """One Namespace per tenant, labelled so the ClusterQueue's namespaceSelector can pick them."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": t.name, "labels": {**MANAGED_BY, "grpo-infra/tenant": t.name}},
        }
        for t in env.tenants
    ]
