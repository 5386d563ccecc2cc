"""The CRDs' `x-kubernetes-validations` (CEL), evaluated with cel-python on a rendered object.

Rules that mention `oldSelf` compare with the stored object on update; a new object has none, so
they are skipped, as the API server does on create.
"""

from __future__ import annotations

import functools
from typing import Any

import celpy

from .crds import schema_for


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_errors(obj: dict[str, Any]) -> list[str]:
    """Every CEL rule of the object's CRD schema that the object breaks, as `path: message`."""
    schema = schema_for(obj.get("apiVersion", ""), obj.get("kind", ""))
    if schema is None:
        return []
    out: list[str] = []
    _walk(schema, obj, "", out)
    return out


def _walk(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue
        try:
            result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        except Exception as exc:  # a rule that cannot evaluate is a failed rule, with the reason
            result = exc
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            out.append(f"{path or '<root>'}: {message}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            child = props.get(key) if key in props else extra if isinstance(extra, dict) else None
            if child is not None:
                _walk(child, sub, f"{path}.{key}" if path else key, out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(schema["items"], item, f"{path}[{i}]", out)
