"""Core Kubernetes objects against the published OpenAPI schemas, in strict mode (no unknown fields)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The oldest Kubernetes minor the stacks target; strict schemas reject fields it does not know.
KUBERNETES_VERSION = "1.31"


def core_errors(obj: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"<root>: no Kubernetes {KUBERNETES_VERSION} schema: {exc}"]
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path) or "<root>"
        return [f"{path}: {exc.message}"]
    return []
