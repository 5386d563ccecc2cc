"""Validate rendered objects the way the cluster would: CRD schemas (closed) and CEL rules, core schemas
in strict mode, and the webhook and admission rules schemas cannot express.

The schema checkers are imported when an object is first checked: those of core schemas and CEL rules
need the `validate` extra (kubernetes-validate, cel-python). The rules (`.rules`) need only the core
dependencies, so `grpo-infra check`, which uses them alone, runs from a plain install.
"""

from __future__ import annotations

from typing import Any

from ..manifests import object_filename
from .rules import admission_errors, rayjob_errors

CRD_GROUPS = ("ray.io", "kueue.x-k8s.io")
# Kinds whose CRDs are not pinned here (Volcano's Queue): checked by our own rules only.
UNPINNED_GROUPS = ("scheduling.volcano.sh",)

__all__ = ["object_errors", "validate_objects"]


def object_errors(obj: dict[str, Any]) -> list[str]:
    """Schema (and CEL) problems of one object, each prefixed with the object's file name."""
    from .cel import cel_errors
    from .core import core_errors
    from .schema import schema_errors

    group = obj.get("apiVersion", "").rpartition("/")[0]
    if group in UNPINNED_GROUPS:
        found: list[str] = []
    elif group in CRD_GROUPS:
        found = schema_errors(obj) + cel_errors(obj)
    else:
        found = core_errors(obj)
    if obj.get("kind") == "RayJob":
        found += rayjob_errors(obj)
    return [f"{object_filename(obj)}: {e}" for e in found]


def validate_objects(objects: list[dict[str, Any]]) -> list[str]:
    """Every problem of a stack's objects, per object and across them (queues against jobs)."""
    out = [e for obj in objects for e in object_errors(obj)]
    return out + admission_errors(objects)
