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


# GKE installs the driver Container-Optimized OS labels DEFAULT or LATEST for the GPU and node version;
# DEFAULT trails LATEST, and R570 reached GKE as LATEST only (cos/overlays/board-overlays, commit af3ca4ea,
# scripts/gpu_driver_versions: "The LATEST tag has been updated to point to the stable 570.133.20 Production
# Branch"). An image whose CUDA needs R570 or newer (CUDA 12.8+; 13.0 needs 580.65.06,
# `grpo_infra.image.driver`) therefore asks for LATEST; the image guard still reads the node's driver at
# job start (/proc/driver/nvidia/version) and stops with one line if even LATEST is older.
LATEST_FROM_BRANCH = 570


def needs_latest_driver(env: Environment) -> bool:
    """Does the image's CUDA need a driver branch GKE offers as LATEST only?"""
    needed = min_driver(env.image.contents.cuda)
    return needed is not None and int(needed.split(".")[0]) >= LATEST_FROM_BRANCH


def gpu_driver_version(env: Environment, pool: Pool) -> str:
    """The pool's `gpuDriverVersion`: as stated, else derived from the image's CUDA (`needs_latest_driver`)."""
    assert pool.gke is not None
    if pool.gke.gpu_driver_version is not None:
        return pool.gke.gpu_driver_version
    return "LATEST" if needs_latest_driver(env) else "DEFAULT"


def pool_driver(env: Environment, pool: Pool) -> str:
    """Where the pool's driver comes from, as the platform team must check it (docs/images.md)."""
    if pool.gke is not None:
        return f"GKE gpuDriverVersion {gpu_driver_version(env, pool)} (the driver GKE installs for the node version)"
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
    return f"CUDA {env.image.contents.cuda} needs NVIDIA driver >= {needed}; pool {env.gang.pool.name}: {pool_driver(env, env.gang.pool)}"
