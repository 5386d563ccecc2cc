"""Plain Kubernetes objects and files: deterministic YAML, stable file names."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block-style YAML; multi-line strings (scripts, embedded configs) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(document: Any) -> str:
    """One YAML document; keys keep the order the renderer built them in, so output is stable."""
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096, allow_unicode=True
    )


def object_filename(obj: dict[str, Any]) -> str:
    """`<kind>.<namespace>.<name>.yaml` (cluster-scoped objects have no namespace part)."""
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return ".".join(p for p in parts if p) + ".yaml"
