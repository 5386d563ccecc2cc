"""Gang rules that hold on both targets: the gang fits its pool and its tenant's quota."""

from __future__ import annotations

from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

ENV = ENVIRONMENT_KEY


def gang_violations(env: Environment) -> list[Violation]:
    """The job's GPUs (every role's, for a disaggregated job) against the tenant's GPU quota."""
    tenant = env.tenant(env.job.tenant)
    gpus = env.job_gpus
    index = next(i for i, t in enumerate(env.tenants) if t.name == tenant.name)
    if gpus > tenant.gpu_quota:
        return [
            Violation(
                "tenant-quota",
                f"{ENV}.tenants[{index}].gpuQuota",
                f"the gang needs {gpus} GPUs at once; tenant {tenant.name} may hold {tenant.gpu_quota}: "
                "it would wait forever",
                f"{gpus - tenant.gpu_quota} GPUs",
            )
        ]
    return []
