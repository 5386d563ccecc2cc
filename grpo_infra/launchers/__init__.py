"""Launchers: the same job on other launch paths (Ray by hand, SkyPilot, dstack), one folder each.

Each launcher is its own package with a pure `render_files(env) -> {path: text}` that returns nothing
when the stack does not declare it; `RENDERERS` lists them for `grpo_infra.synth`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..spec import Environment
from . import dstack, ray, skypilot

RENDERERS: dict[str, Callable[[Environment], dict[str, str]]] = {
    "ray": ray.render_files,
    "skypilot": skypilot.render_files,
    "dstack": dstack.render_files,
}


def render_files(env: Environment) -> dict[str, str]:
    """Every declared launcher's files, keyed by `<launcher>/<file>`."""
    files: dict[str, str] = {}
    for render in RENDERERS.values():
        files.update(render(env))
    return dict(sorted(files.items()))
