"""The Jinja2 environment over the top-level `slurm/` template directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..lifecycle.ray_node import shell_templates

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "slurm"

__all__ = ["TEMPLATE_DIR", "render_template", "shell_templates"]


def render_template(name: str, **context: Any) -> str:
    """Render `slurm/<name>` with already computed values."""
    return shell_templates(TEMPLATE_DIR).get_template(name).render(**context)
