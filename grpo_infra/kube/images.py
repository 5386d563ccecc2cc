"""Every image archive a real node of the local cluster imports into its containerd.

The operators' images (made from the binaries built here, `operator_images`) and the stack's CPU
image (`grpo-infra image build STACK`, minutes, so never built implicitly): each an OCI archive in
`${GRPO_INFRA_CACHE:-~/.cache/grpo-infra}/images/` whose index names the reference the pods use
(`ctr -n k8s.io images import FILE` tags it so). Nothing is pulled: the pods' `IfNotPresent`
finds them.
"""

from __future__ import annotations

from pathlib import Path

from ..image import build as job_image
from ..image.oci import OCIError
from ..spec import Environment
from . import operator_images


def node_archives(env: Environment, project: Path, stack: str, *, operators: bool = True) -> list[Path]:
    """The archives to import on every node: the operators' (made if missing, seconds) and the job's.

    Raises OCIError with one line when the job's image for the current recipe is not built."""
    archives = operator_images.ensure_all() if operators else []
    plan = job_image.recipe(env, project)
    archive = job_image.archive_path(plan)
    if not archive.is_file():
        raise OCIError(f"{plan.ref} is not built for this checkout: run `grpo-infra image build {stack}`")
    return [*archives, archive]
