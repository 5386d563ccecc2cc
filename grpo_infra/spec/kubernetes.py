"""Kubernetes target settings: where the cluster comes from and how gangs are admitted."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from .base import SpecModel


class NodeReserve(SpecModel):
    """What each node keeps back for the kubelet, system daemons and device plugins.

    Queue quotas are the pool's capacity minus this reserve on every node, so that an admitted
    gang always fits on the nodes.
    """

    cpus: Annotated[float, Field(ge=0)]
    """CPUs kept back on every node."""
    memory_gib: Annotated[float, Field(ge=0)]
    """GiB of memory kept back on every node."""


class Topology(SpecModel):
    """Node label keys for topology-aware scheduling, coarsest first."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = "gpu-topology"
    """Name of the Kueue Topology object."""
    levels: list[Annotated[str, StringConstraints(min_length=1, max_length=316)]] = Field(min_length=1, max_length=16)
    """Node label keys, coarsest first; `kubernetes.io/hostname` may only be last."""

    @field_validator("levels")
    @classmethod
    def _ordered(cls, levels: list[str]) -> list[str]:
        if len(levels) != len(set(levels)):
            raise ValueError("topology levels must be unique")
        if "kubernetes.io/hostname" in levels[:-1]:
            raise ValueError("kubernetes.io/hostname may only be the last (finest) level")
        return levels


# The Ray release this project pins and tests against (`ray[default]==2.60.0` in pyproject.toml).
RAY_VERSION = "2.60.0"
# KubeRay (>= 1.5.1) rejects `authOptions.mode: token` when `rayVersion` is older: Ray's token
# authentication first shipped in 2.52.0.
TOKEN_AUTH_MIN_RAY = "2.52.0"

PriorityName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


class RayJobSettings(SpecModel):
    """How the GRPO RayJob is sized around its GPU workers, and how long Kubernetes keeps it."""

    head_cpus: Annotated[float, Field(gt=0, le=256)] = Field(
        default=8, description="CPUs of the Ray head (a CPU pod off the GPU pool; runs verl's driver)."
    )
    head_memory_gib: Annotated[float, Field(gt=0, le=4096)] = 32
    """Memory of the Ray head pod, GiB."""
    priority_class: PriorityName = Field(
        default="grpo-normal", description="Kueue WorkloadPriorityClass; one of `priorityClasses`."
    )
    ttl_seconds_after_finished: Annotated[int, Field(ge=1)] = Field(
        default=3600, description="Keep the finished RayJob (and its logs) this long before KubeRay deletes it."
    )
    active_deadline_seconds: Annotated[int, Field(ge=60)] | None = Field(
        default=7 * 24 * 3600, description="Fail the job after this long running; no limit when null."
    )
    backoff_limit: Annotated[int, Field(ge=0, le=10)] = Field(
        default=1, description="New Ray clusters KubeRay may start after a failure (training resumes from checkpoint)."
    )
    ray_version: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+\.\d+$")] | None = Field(
        default=None,
        description="Leave unset: `rayClusterSpec.rayVersion` is `image.contents.ray`. When set, `check` refuses "
        f"it unless it equals the image's Ray; KubeRay accepts `rayAuth: token` only from {TOKEN_AUTH_MIN_RAY}.",
    )
    ray_auth: Literal["token", "disabled"] = Field(
        default="token",
        description="`token`: KubeRay generates a Secret and every Ray pod and the submitter authenticate with it "
        "(dashboard, job API and GCS require it); `disabled`: anyone who reaches the pods can submit code.",
    )

    @model_validator(mode="after")
    def _token_auth_needs_ray(self) -> RayJobSettings:
        if (
            self.ray_version is not None
            and self.ray_auth == "token"
            and _release(self.ray_version) < _release(TOKEN_AUTH_MIN_RAY)
        ):
            raise ValueError(
                f"rayAuth: token needs Ray >= {TOKEN_AUTH_MIN_RAY} in the image, but rayVersion is "
                f"{self.ray_version}; use a newer image (and set rayVersion to its Ray) or set rayAuth: disabled"
            )
        return self


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _default_priority_classes() -> dict[str, int]:
    return {"grpo-high": 10000, "grpo-normal": 1000, "grpo-low": 100}


class Kubernetes(SpecModel):
    """A Kubernetes cluster that runs the gang through KubeRay and Kueue (or Volcano)."""

    provider: Literal["eks", "gke", "existing"]
    """Where the nodes come from: an EKS node group, a GKE node pool, or existing nodes labelled and tainted by the stack."""
    cluster_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    """The existing cluster the stack deploys into."""
    scheduler: Literal["kueue", "volcano"] = "kueue"
    """Gang admission: Kueue (suspend until the whole gang fits) or Volcano."""
    node_reserve: NodeReserve
    topology: Topology | None = None
    pods_ready_timeout_minutes: Annotated[int, Field(ge=5, le=1440)] = Field(
        default=45,
        description="Kueue evicts and requeues a gang whose pods are not all ready by then; covers pulling a "
        "multi-GB verl image onto every node.",
    )
    priority_classes: dict[PriorityName, Annotated[int, Field(ge=-2147483648, le=1000000000)]] = Field(
        default_factory=_default_priority_classes, description="Kueue WorkloadPriorityClasses: name → value."
    )
    ray_job: RayJobSettings = Field(default_factory=RayJobSettings)

    @model_validator(mode="after")
    def _known_priority_class(self) -> Kubernetes:
        if self.ray_job.priority_class not in self.priority_classes:
            known = ", ".join(sorted(self.priority_classes)) or "none"
            raise ValueError(
                f"rayJob.priorityClass {self.ray_job.priority_class!r} is not in priorityClasses ({known})"
            )
        return self
