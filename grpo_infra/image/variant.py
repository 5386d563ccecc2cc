"""The CPU variant of a stack's image: what it holds, as a declaration the image guard can hold it to.

`grpo-infra image build` (grpo_infra/image/build.py) makes it for nodes without GPUs; a stack whose
nodes run it (`image.variant: cpu`, the local cluster) renders its pods' guard from this declaration,
so the rendered pods and the built image agree by construction.
"""

from __future__ import annotations

from ..spec import Environment
from ..spec.image import ImageContents
from . import guard_args, node_fact_args

# The production bases are Ubuntu 24.04 (`-ubuntu24.04`: CPython 3.12, glibc 2.39). Only Debian's
# archive is reachable from the project's machines, and no Debian release ships CPython 3.12: trixie's
# only CPython is 3.13, which verl 0.9.1 refuses (Requires-Python <3.13); bookworm's is 3.11, inside
# verl's range and the project's own (>=3.11). So the variant is Debian 12 with CPython 3.11 (glibc
# 2.36): the Python minor differs from the declaration, and the variant's guard is told so.
SUITE = "bookworm"
SUITE_PYTHON = "3.11"


def variant_contents(contents: ImageContents) -> ImageContents:
    """What the CPU variant holds, as a declaration the guard can hold it to.

    The same Ray, verl and engine releases; the suite's CPython; no CUDA (no torch, so no driver
    floor), attention by torch's own `sdpa` (flash-attn is a CUDA extension); grpo-infra."""
    return contents.model_copy(
        update={
            "python": SUITE_PYTHON,
            "cuda": None,
            "attention": "sdpa",
            "efa": False,
            "nccl_tests": False,
            "grpo_infra": True,
        }
    )


def variant_env(env: Environment) -> Environment:
    """The stack with its image declared as the CPU variant (what the guard in the local cluster checks)."""
    image = env.image.model_copy(update={"contents": variant_contents(env.image.contents)})
    return env.model_copy(update={"image": image})


def variant_guard_args(env: Environment, gpu_node: bool = True) -> list[str]:
    """The guard's arguments for the CPU variant: its own Python, no CUDA, grpo-infra importable; and the
    node's facts of the declared image (its CUDA's driver floor, the pool's HCAs), which the local GPU
    nodes present as a cloud node does."""
    args = guard_args(variant_env(env), grpo_infra=True, gpu_node=False)
    return args + node_fact_args(env, gpu_node)


def runtime_contents(env: Environment) -> ImageContents:
    """What the stack's pods really run: the declared contents, or their CPU variant (`image.variant: cpu`)."""
    return variant_contents(env.image.contents) if env.image.variant == "cpu" else env.image.contents


def runtime_guard_args(env: Environment, gpu_node: bool = True) -> list[str]:
    """The guard's arguments for what the stack's pods run: the declaration, or the CPU variant's;
    `gpu_node=False` for a pod on a node without GPUs (see `guard_args`)."""
    if env.image.variant == "cpu":
        return variant_guard_args(env, gpu_node)
    return guard_args(env, gpu_node=gpu_node)
