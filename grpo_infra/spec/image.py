"""The job's container image: what it holds, declared once per stack.

Every version the job depends on inside its image lives here and nowhere else: the RayJob's
`rayVersion`, the verl config the overrides are checked against, verl's `rollout.name` and the
runtime guard's expectations are all read from `image.contents`. An image is either built from the
stack (`build`: `synth` renders its Dockerfile, docs/images.md) or prebuilt (no `build`: the stack
declares what the image at `ref` holds, and `check` and the runtime guard hold it to that).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import SpecModel
from .strings import MAX_IMAGE_REF

# A release such as 2.60.0 or 0.5.2.post1 (PEP 440 public versions without epochs or local parts).
Version = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")]
# major.minor: Python and CUDA are declared at that precision.
MinorVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d+$")]
# A registry reference without a digest: [registry/]path[:tag].
ImageRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*(:[\w][\w.-]{0,127})?$",
        max_length=MAX_IMAGE_REF,
    ),
]
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
EngineName = Literal["vllm", "sglang"]
# transformers' `attn_implementation` values verl's FSDP actor and reference can be built with.
AttentionName = Literal["flash_attention_2", "sdpa", "eager", "flex_attention"]
# verl 0.9.1 builds its models with flash_attention_2 unless told otherwise
# (verl/workers/config/model.py: `override_config.get("attn_implementation", "flash_attention_2")`).
VERL_DEFAULT_ATTENTION = "flash_attention_2"


class Engine(SpecModel):
    """The rollout engine installed in the image."""

    name: EngineName
    """`vllm` or `sglang`: verl's `actor_rollout_ref.rollout.name`."""
    version: Version
    """The engine's release (its Python distribution's version)."""


class ImageContents(SpecModel):
    """What the image holds: what a build installs, or the facts declared for a prebuilt image.

    The runtime guard compares these with the real image in every job."""

    python: MinorVersion
    """Python major.minor of `python3` in the image."""
    cuda: MinorVersion | None = Field(
        default=None, description="CUDA major.minor torch was built for; null only for CPU-only nodes (the sandbox)."
    )
    ray: Version
    """The Ray release: the RayJob's `rayVersion`, and what token authentication and KubeRay's probes depend on."""
    verl: Version | None = Field(
        default=None, description="verl's release; null when the image has none (`check` refuses such an image)."
    )
    engine: Engine | None = Field(
        default=None, description="The rollout engine; null when the image has none (`check` refuses such an image)."
    )
    attention: AttentionName = VERL_DEFAULT_ATTENTION
    """The attention implementation verl's actor and reference models use (transformers'
    `attn_implementation`): `flash_attention_2` (verl's default) needs flash-attn in the image, which the
    build compiles and the guard imports; `sdpa`, `eager` and `flex_attention` need only torch and are
    passed to verl as `+actor_rollout_ref.model.override_config.attn_implementation`."""
    rdma: bool | None = None
    """The RDMA verbs userspace (rdma-core, libibverbs1, ibverbs-providers, librdmacm1), needed on InfiniBand and
    RoCE pools; a built image gets it from its pool's fabric (leave unset), a prebuilt one must state it."""
    efa: bool = False
    """libfabric with the EFA provider and the aws-ofi-nccl plugin (needed on EFA pools)."""
    nccl_tests: bool = False
    """nccl-tests' `all_reduce_perf`, built with MPI, on PATH (Slurm's nccl fabric gate)."""
    grpo_infra: bool = False
    """This project's gate modules (`python3 -m grpo_infra.cli nccl verdict`, the gloo gate) importable."""


class ImageBuild(SpecModel):
    """Build the image from this base: `synth` renders `DIR/STACK/image/Dockerfile`."""

    base: ImageRef
    """Base image with CUDA, cuDNN and the NCCL/compilers toolchain (an `nvidia/cuda:*-devel-ubuntu*` image)."""
    base_digest: Digest | None = None
    """Pin the base by digest (`FROM base@sha256:...`); recommended: a tag can move."""
    lock: str | None = None
    """The hashed lock of the image's Python set, read from `stacks/locks/<stack>.txt` when the stack
    is loaded (written by `grpo-infra image lock STACK`); never written in the stack file."""


class Image(SpecModel):
    """The image every Ray process of the job runs in."""

    ref: ImageRef | None = Field(
        default=None,
        description="Where the job pulls the image from (and where a build is pushed); not used on Slurm "
        "with `container.runtime: none`, where the nodes' own installation is the image.",
    )
    digest: Digest | None = None
    """Pull by digest (`ref@digest`) so the image the stack declared is the image that runs."""
    build: ImageBuild | None = None
    """Render a Dockerfile that installs `contents`; absent: the image at `ref` is prebuilt."""
    contents: ImageContents
    variant: Literal["production", "cpu"] = "production"
    """What the stack's nodes run: `production`, the image `contents` declares; `cpu`, the CPU variant
    `grpo-infra image build` makes from these contents for nodes without GPUs (the local cluster:
    its suite's Python, no CUDA, `sdpa`, grpo-infra; grpo_infra/image/variant.py), which the pods'
    image guard then holds them to. `check` refuses `cpu` on a pool with real GPUs."""

    @property
    def pinned_ref(self) -> str | None:
        """`ref@digest` when a digest is given, else `ref`."""
        if self.ref is None:
            return None
        return f"{self.ref}@{self.digest}" if self.digest else self.ref


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version (`2.53.0rc1` → (2, 53, 0)), for ordering comparisons."""
    head = version.split("rc")[0].split("a")[0].split("b")[0].split(".post")[0].split(".dev")[0]
    return tuple(int(part) for part in head.split(".") if part)
