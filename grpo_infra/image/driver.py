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


# The first EKS-optimized AL2023 NVIDIA AMI release (date part of `releaseVersion`) per Kubernetes minor from
# which every release ships at least the given driver: the `kmod-nvidia-latest-dkms` version of each
# release's "Kubernetes 1.x" table in awslabs/amazon-eks-ami CHANGELOG.md (read at its v20260714 entry;
# 580 reached 1.34 in v20251023, 1.33 in v20251029, 1.31-1.32 in v20251108, 1.29-1.30 in v20251120, per
# the "default to 580 driver" changes tracked in awslabs/amazon-eks-ami#2470). No release of 1.28 or older
# ships R575+. The AL2023 NVIDIA AMIs began at v20240924 with 560.35.03, so a need below 570 is met by all.
_R580 = {
    "1.29": "20251120",
    "1.30": "20251120",
    "1.31": "20251108",
    "1.32": "20251108",
    "1.33": "20251029",
    "1.34": "20251023",
    "1.35": "20260114",
    "1.36": "20260610",
}
EKS_AMI_MIN_RELEASE: dict[str, dict[str, str]] = {
    "580.65.06": _R580,
    # 1.27 had a 575 release; 1.29 and newer went from 570 straight to 580, so their first R575+ is their first R580.
    "575.51.03": {"1.27": "20250715", **_R580},
    "570.26": {
        **{f"1.{minor}": "20250410" for minor in range(25, 32)},
        "1.32": "20250403",
        "1.33": "20250519",
        "1.34": "20250915",
        "1.35": "20260114",
        "1.36": "20260610",
    },
}
EKS_AMI_FIRST_RELEASE = "20240924"


def eks_release_problem(needed: str, release_version: str) -> str | None:
    """Why the AMI release `release_version` (`1.34.1-20251023`) lacks driver `needed`, or None when it has it."""
    kubernetes, _, date = release_version.partition("-")
    minor = ".".join(kubernetes.split(".")[:2])
    if int(needed.split(".")[0]) < 570:
        return None if date >= EKS_AMI_FIRST_RELEASE else f"{release_version} predates the AL2023 NVIDIA AMIs"
    table = EKS_AMI_MIN_RELEASE.get(needed)
    if table is None:
        return f"no EKS AMI release is known to ship driver {needed}"
    first = table.get(minor)
    if first is None:
        return f"no AL2023 NVIDIA AMI for Kubernetes {minor} ships driver >= {needed}"
    if date < first:
        return f"AMI release {release_version} ships an older driver; Kubernetes {minor} has >= {needed} from {minor}.x-{first}"
    return None


def eks_release_statement(needed: str | None) -> str:
    """Which AMI releases carry the driver, for the runbook line of an EKS pool."""
    table = EKS_AMI_MIN_RELEASE.get(needed or "")
    if not table:
        return "any AL2023 NVIDIA AMI release"
    return "an AMI release from " + ", ".join(f"{minor}: {date}" for minor, date in table.items())


def pool_driver(env: Environment, pool: Pool) -> str:
    """Where the pool's driver comes from, as the platform team must check it (docs/images.md)."""
    if pool.gke is not None:
        return f"GKE gpuDriverVersion {gpu_driver_version(env, pool)} (the driver GKE installs for the node version)"
    if pool.eks is not None:
        needed = min_driver(env.image.contents.cuda)
        pinned = pool.eks.release_version
        release = f"release {pinned}" if pinned else "the newest release when the node group was created"
        return f"the EKS-optimized AL2023 NVIDIA AMI, {release}; needs {eks_release_statement(needed)}"
    if pool.existing is not None and pool.existing.operator_installs_driver:
        return "the GPU operator's driver version"
    return "the hosts' preinstalled driver"


def driver_statement(env: Environment) -> str | None:
    """One line per stack: the minimum driver the image needs and where the gang's pool gets one."""
    needed = min_driver(env.image.contents.cuda)
    if needed is None:
        return None
    return f"CUDA {env.image.contents.cuda} needs NVIDIA driver >= {needed}; pool {env.gang.pool.name}: {pool_driver(env, env.gang.pool)}"
