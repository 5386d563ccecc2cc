"""Kubernetes renderers: spec → plain objects and Helm releases."""

from __future__ import annotations

from ..manifests import dump_yaml, object_filename
from ..spec import Environment
from .namespaces import tenant_namespaces

__all__ = ["objects", "render_files", "tenant_namespaces"]


def objects(env: Environment) -> list[dict]:
    """Every Kubernetes object the stack applies, in apply order."""
    return [*tenant_namespaces(env)]


def render_files(env: Environment) -> dict[str, str]:
    """`kubernetes/<object>.yaml` for every object."""
    return {f"kubernetes/{object_filename(obj)}": dump_yaml(obj) for obj in objects(env)}
