"""Gang rules that hold on both targets: the gang fits its pool and its tenant's quota."""

from __future__ import annotations

from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

ENV = ENVIRONMENT_KEY


def gang_violations(env: Environment) -> list[Violation]:
    """The job's gang against the tenant's GPU quota."""
    gang, tenant = env.gang, env.tenant(env.job.tenant)
    index = next(i for i, t in enumerate(env.tenants) if t.name == tenant.name)
    if gang.world_size > tenant.gpu_quota:
        return [
            Violation(
                "tenant-quota",
                f"{ENV}.tenants[{index}].gpuQuota",
                f"the gang needs {gang.world_size} GPUs at once; tenant {tenant.name} may hold {tenant.gpu_quota}: "
                "it would wait forever",
                f"{gang.world_size - tenant.gpu_quota} GPUs",
            )
        ]
    return []
