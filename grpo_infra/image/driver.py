"""The lowest NVIDIA host driver each CUDA release of an image runs on, and what each pool provides.

From "CUDA Toolkit and Corresponding Driver Versions" (Table 3 of NVIDIA's CUDA Toolkit release notes,
e.g. docs.nvidia.com/cuda/archive/13.0.0/cuda-toolkit-release-notes/, "CUDA 13.0 GA >= 580.65.06"): the
Linux x86_64 driver each toolkit's GA release needs. torch's CUDA wheels carry the CUDA runtime
(nvidia-cuda-runtime), but the kernel driver is the host's: an older one fails at the first CUDA call
("CUDA driver version is insufficient for CUDA runtime version"), after the gang was admitted.
"""

from __future__ import annotations

from ..spec import Environment
from ..spec.pools import Pool

MIN_DRIVER = {
    "12.4": "550.54.14",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}


def min_driver(cuda: str | None) -> str | None:
    """The lowest host driver for an image built for CUDA `cuda` (major.minor); None without CUDA or data."""
    return MIN_DRIVER.get(cuda) if cuda else None


def pool_driver(pool: Pool) -> str:
    """Where the pool's driver comes from, as the platform team must check it (docs/images.md)."""
    if pool.gke is not None:
        version = pool.gke.gpu_driver_version or "derived from the image's CUDA (grpo_infra.nodepools.gke)"
        return f"GKE gpuDriverVersion {version} (the driver GKE installs for the node version)"
    if pool.eks is not None:
        return "the EKS-optimized AL2023 NVIDIA AMI release of the node group (its release notes list the driver)"
    if pool.existing is not None and pool.existing.operator_installs_driver:
        return "the GPU operator's driver version"
    return "the hosts' preinstalled driver"


def driver_statement(env: Environment) -> str | None:
    """One line per stack: the minimum driver the image needs and where the gang's pool gets one."""
    needed = min_driver(env.image.contents.cuda)
    if needed is None:
        return None
    return f"CUDA {env.image.contents.cuda} needs NVIDIA driver >= {needed}; pool {env.gang.pool.name}: {pool_driver(env.gang.pool)}"
