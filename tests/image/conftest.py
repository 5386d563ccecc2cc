"""Stacks and variants for the image tests, and the verlai image as its own Dockerfiles describe it."""

from __future__ import annotations

from typing import Any

from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT, SHIPPED_STACKS
from tests.slurm.variants import stack, variant

BUILT = [s for s in SHIPPED_STACKS if load_stack(s, ROOT).environment.image.build is not None]

# verlai/verl:app-verl0.6-transformers4.56.1-sglang0.5.2-mcore0.13.0-te2.2, the image the stacks named
# before they declared one, as verl's own Dockerfiles build it: FROM nvcr.io/nvidia/pytorch:25.03-py3
# (Python 3.12, CUDA 12.8; docker/verl0.6-cu128-torch2.8.0-fa2.7.4/Dockerfile.base:1-3), Ray unpinned
# (Dockerfile.base:41; a verl issue reports images resolving 2.47.1), sglang 0.5.2 and no vLLM
# (Dockerfile.app.sglang:3), no verl, no EFA userspace, no nccl-tests.
VERLAI_SGLANG: dict[str, Any] = {
    "ref": "verlai/verl:app-verl0.6-transformers4.56.1-sglang0.5.2-mcore0.13.0-te2.2",
    "contents": {"python": "3.12", "cuda": "12.8", "ray": "2.47.1", "engine": {"name": "sglang", "version": "0.5.2"}},
}


def with_image(name: str, image: dict[str, Any], engine: str | None = None) -> Environment:
    """The stack with `image` replaced (and `job.rollout.engine` set), as a user would edit the YAML."""

    def edit(data: dict[str, Any]) -> None:
        data["image"] = image
        if engine is not None:
            data["job"]["rollout"]["engine"] = engine

    return variant(name, edit)


__all__ = ["BUILT", "SHIPPED_STACKS", "VERLAI_SGLANG", "stack", "variant", "with_image"]
