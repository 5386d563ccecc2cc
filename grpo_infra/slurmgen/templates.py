"""The Jinja2 environment over the top-level `slurm/` template directory."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "slurm"


@cache
def shell_templates(directory: Path) -> jinja2.Environment:
    """Jinja2 over a folder of shell-script templates: strict, unescaped, and with a comment marker
    that does not collide with bash (the Slurm templates and the launchers' scripts share it)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # `${#array[@]}` is everyday bash; Jinja's default `{#` comment marker would swallow it.
        comment_start_string="{##",
        comment_end_string="##}",
    )


def render_template(name: str, **context: Any) -> str:
    """Render `slurm/<name>` with already computed values."""
    return shell_templates(TEMPLATE_DIR).get_template(name).render(**context)
