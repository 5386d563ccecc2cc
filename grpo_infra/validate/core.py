"""Core Kubernetes objects against the published OpenAPI schemas, in strict mode (no unknown fields)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The oldest Kubernetes minor the stacks target; strict schemas reject fields it does not know.
KUBERNETES_VERSION = "1.31"
# Kinds a stack renders only where the cluster must be newer (`check` says so), validated against the
# release that made them GA: a RayCronJob's tick-name policy (`grpo_infra.k8s.raycronjob`, KEP-3962).
NEWER_KINDS = {
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36",
}


def core_errors(obj: dict[str, Any]) -> list[str]:
    version = NEWER_KINDS.get((obj.get("apiVersion", ""), obj.get("kind", "")), KUBERNETES_VERSION)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"<root>: no Kubernetes {version} schema: {exc}"]
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "<root>"
        return [f"{path}: {exc.message}"]
    return []
