"""The Jinja2 environment over the Slurm templates, `grpo_infra/slurmgen/templates/*.j2`.

The templates are package data of `grpo_infra.slurmgen` (declared in pyproject's package-data) and are
read through the package, so an installed wheel renders the same bytes as a checkout.
"""

from __future__ import annotations

from typing import Any

from ..lifecycle.ray_node import shell_templates

TEMPLATE_PACKAGE = "grpo_infra.slurmgen"

__all__ = ["TEMPLATE_PACKAGE", "render_template", "shell_templates"]


def render_template(name: str, **context: Any) -> str:
    """Render `grpo_infra/slurmgen/templates/<name>` with already computed values."""
    return shell_templates(TEMPLATE_PACKAGE).get_template(name).render(**context)
