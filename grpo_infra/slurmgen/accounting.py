"""The tenants' Slurm quotas: a reviewable `sacctmgr` script creating each tenant's account and QOS.

On Kubernetes a tenant's `gpuQuota` is a Kueue ClusterQueue's nominal quota; on Slurm the same number
is a QOS group limit, `GrpTRES=gres/gpu=<gpuQuota>`, on the QOS the tenant submits to (`queue`), and the
tenant's account may use that QOS only. Slurm holds a job whose GPUs would take its QOS over the limit
pending with reason `QOSGrpGRES` (sacctmgr(1), Slurm 22.05, "GrpTRES" and the note on group limits) when
slurm.conf tracks the TRES (`AccountingStorageTRES=gres/gpu`, written by the slurm.conf fragment) and
enforces limits (`AccountingStorageEnforce=associations,limits,qos`, slurm.conf(5)).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import Environment
from .conf import GRES_NAME
from .templates import render_template

ACCOUNTING_PATH = "slurm/accounting.sh"
# The TRES a GPU quota limits, as sacctmgr and AccountingStorageTRES spell it.
GPU_TRES = f"gres/{GRES_NAME}"


@dataclass(frozen=True)
class TenantQuota:
    """One tenant on Slurm: its account, the QOS it submits to, and that QOS's GPU limit."""

    account: str
    qos: str
    gpus: int

    @property
    def grp_tres(self) -> str:
        return f"{GPU_TRES}={self.gpus}"


def tenant_quotas(env: Environment) -> list[TenantQuota]:
    """Every tenant's account, QOS and GPU limit, in the stack's order."""
    return [TenantQuota(t.name, t.queue, t.gpu_quota) for t in env.tenants]


def accounting_script(env: Environment) -> str:
    """`slurm/accounting.sh`: idempotent sacctmgr commands an administrator reviews, then runs once."""
    slurm = env.slurm
    assert slurm is not None
    return render_template(
        "accounting.sh.j2",
        cluster=slurm.cluster_name,
        partition=slurm.partition,
        tres=",".join(slurm.accounting_tres),
        gres_name=GRES_NAME,
        gpu_tres=GPU_TRES,
        quotas=tenant_quotas(env),
    )
