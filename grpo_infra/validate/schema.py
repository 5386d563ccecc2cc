"""CRD schemas as closed JSON Schemas: a misspelled field is an error, as a strict API server makes it."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema

from .crds import schema_for


def closed(schema: dict[str, Any], root: bool = True) -> dict[str, Any]:
    """OpenAPI v3 (Kubernetes dialect) → JSON Schema with every object that lists properties closed."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {
                name: {"type": "object"} if root and name == "metadata" else closed(sub, root=False)
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = closed(value, root=False)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [closed(s, root=False) for s in value]
        elif key in ("x-kubernetes-validations", "description", "format", "nullable", "x-kubernetes-int-or-string"):
            continue
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if schema.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


@functools.cache
def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """A cached validator for a CRD kind, or None when the kind is not one of the pinned CRDs."""
    schema = schema_for(api_version, kind)
    if schema is None:
        return None
    return jsonschema.Draft202012Validator(closed(schema))


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of a custom resource, as `path: message`."""
    check = validator(obj.get("apiVersion", ""), obj.get("kind", ""))
    if check is None:
        return [f"no pinned CRD serves {obj.get('apiVersion')} {obj.get('kind')}"]
    return [
        f"{_path(e.absolute_path)}: {e.message}"
        for e in sorted(check.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "<root>"
