"""The local clusters' stand-ins, kept where they belong: the CPU image variant and the probe.

Both exist because placeholder GPUs cannot run CUDA (`PLACEHOLDER_GPU`): `image.variant: cpu` runs the
image `grpo-infra image build` makes without CUDA, and `job.probe` runs the probe in verl's place. On a
pool of real GPUs either one would hold the gang's GPUs and train nothing.
"""

from __future__ import annotations

from ..image.variant import runtime_contents
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.pools import PLACEHOLDER_GPU
from .violation import Violation

VARIANT = f"{ENVIRONMENT_KEY}.image.variant"
PROBE = f"{ENVIRONMENT_KEY}.job.probe"


def stand_in_violations(env: Environment) -> list[Violation]:
    """A stand-in where it cannot run."""
    out: list[Violation] = []
    pool = env.gang.pool
    real_gpus = pool.gpu.model != PLACEHOLDER_GPU
    if env.image.variant == "cpu":
        if env.target == "slurm":
            out.append(
                Violation(
                    "image-variant-target",
                    VARIANT,
                    "the CPU variant is loaded into the local Kubernetes nodes; Slurm nodes run slurm.container's "
                    "image or their own installation: remove variant",
                )
            )
        elif real_gpus:
            out.append(
                Violation(
                    "image-variant-gpus",
                    VARIANT,
                    f"the CPU variant has no CUDA, so pool {pool.name}'s {pool.gpu.model} GPUs would sit idle; "
                    f"it is for gpu.model {PLACEHOLDER_GPU} (the local cluster): remove variant",
                )
            )
    if env.job.probe is not None:
        if env.target == "slurm":
            out.append(
                Violation(
                    "probe-target",
                    PROBE,
                    "the sbatch runs verl; on Slurm the probe runs through GRPO_ENTRYPOINT (docs/sandbox.md): remove probe",
                )
            )
        elif not runtime_contents(env).grpo_infra:
            out.append(
                Violation(
                    "probe-grpo-infra",
                    PROBE,
                    "the probe runs `python3 -m grpo_infra.probe` in the image, which lacks grpo-infra "
                    "(ModuleNotFoundError): set image.contents.grpoInfra: true or image.variant: cpu",
                )
            )
    return out


def stand_in_warnings(env: Environment) -> list[Violation]:
    """The probe on real GPUs: allowed (a smoke test of a new cluster's placement), never a training run."""
    pool = env.gang.pool
    if env.job.probe is None or env.target != "kubernetes" or pool.gpu.model == PLACEHOLDER_GPU:
        return []
    return [
        Violation(
            "probe-real-gpus",
            PROBE,
            f"the probe runs instead of verl on pool {pool.name}'s {pool.gpu.model} GPUs: it checks placement "
            "and checkpoints, and trains nothing",
        )
    ]
