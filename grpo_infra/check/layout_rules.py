"""Rules of a disaggregated job (`job.layout`): every role can be admitted, and verl places each on its pool.

On Slurm the roles are the components of one heterogeneous job, all started at once or none (Slurm 22.05
heterogeneous_jobs.html, "all heterogeneous job components are either all scheduled at the same time or
deferred"). On Kubernetes Kueue admits the job's worker groups as pod sets of one Workload, all together or
none (Kueue v0.19.2 pkg/controller/jobs/raycluster/common.go BuildPodSets; grpo_infra/validate/rules.py judges
the flavors). Either way a role the tenant's quota does not cover keeps the trainer's nodes idle too, forever.

Ray then places verl's roles on the nodes Kueue admitted. verl 0.9.1 pins no role to a pool: its resource
pools ask for `{"CPU": n, "GPU": 1}` bundles, one placement group of `n_gpus_per_node` bundles per node,
STRICT_PACK (verl/single_controller/ray/base.py:146-158), and `ResourcePoolManager.create_resource_pool`
never passes the `accelerator_type` that would add a custom resource to them (base.py:195-216, 121/149-150).
The fully asynchronous trainer creates the trainer's pool first (fully_async_main.py:77-84, 138-155) and each
rollout replica a pool of its own afterwards (workers/rollout/replica.py:189-208), the reward model's replicas
likewise (experimental/reward_loop/reward_model.py:53-94). So what keeps a role on its pool is arithmetic
alone: the trainer's placement groups, created while every GPU is free, land only on nodes with at least
`n_gpus_per_node` GPUs; when no other role's pool has that many per node, they can only fill the trainer's
nodes, and the rollout's replicas the rest. Two standalone replica kinds (rollout, reward model) on different
pools have nothing that tells them apart.
"""

from __future__ import annotations

from ..k8s.queues import gpu_split
from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

ENV = ENVIRONMENT_KEY
LAYOUT = f"{ENV}.job.layout"


def layout_violations(env: Environment) -> list[Violation]:
    """A disaggregated job's roles against the tenant's quota, verl's placement and the target."""
    if not env.disaggregated:
        return []
    return [*_target(env), *_role_quota(env), *_placement(env)]


def _target(env: Environment) -> list[Violation]:
    out = []
    if env.launchers is not None:
        out.append(
            Violation(
                "layout-target",
                f"{ENV}.launchers",
                "the launchers start one pool's gang: a disaggregated job has none (remove `launchers`)",
            )
        )
    return out


def _role_quota(env: Environment) -> list[Violation]:
    """Each pool's GPUs the roles on it need, against the tenant's quota there (`gpu_split`, the same
    split the ClusterQueue gets: grpo_infra/k8s/queues.py)."""
    tenant = env.tenant(env.job.tenant)
    index = next(i for i, t in enumerate(env.tenants) if t.name == tenant.name)
    if env.target == "slurm":
        return _role_quota_slurm(env, index)
    split = gpu_split(env, tenant)
    needed: dict[str, int] = {}
    out = []
    for role in env.role_gangs():
        needed[role.pool.name] = needed.get(role.pool.name, 0) + role.world_size
        have = split[role.pool.name]
        if needed[role.pool.name] > have:
            short = needed[role.pool.name] - have
            out.append(
                Violation(
                    "layout-role-quota",
                    f"{ENV}.tenants[{index}].gpuQuota",
                    f"role {role.role} needs {role.world_size} GPUs of pool {role.pool.name}; tenant {tenant.name}'s "
                    f"quota there is {have} (gpuQuota {tenant.gpu_quota}, filled pool by pool in spec order): "
                    "Kueue admits no role until all fit",
                    f"{short} GPUs of pool {role.pool.name}",
                )
            )
    return out


def _role_quota_slurm(env: Environment, index: int) -> list[Violation]:
    """On Slurm the quota is one number, the QOS's `GrpTRES=gres/gpu` (grpo_infra/slurmgen/accounting.py), and
    each component of the heterogeneous job counts against it as a job of its own (heterogeneous_jobs.html,
    "Each component of a heterogeneous job counts as a "job" with respect to resource limits"): the roles'
    GPUs all together must fit, or every component pends (QOSGrpGRES). The role that crosses it is named."""
    tenant = env.tenants[index]
    held = 0
    for role in env.role_gangs():
        held += role.world_size
        if held > tenant.gpu_quota:
            return [
                Violation(
                    "layout-role-quota",
                    f"{ENV}.tenants[{index}].gpuQuota",
                    f"role {role.role} needs {role.world_size} GPUs of pool {role.pool.name}, which brings the job "
                    f"to {held} GPUs; tenant {tenant.name}'s quota is {tenant.gpu_quota} (its QOS's GrpTRES): "
                    "Slurm starts no component of the heterogeneous job until all fit",
                    f"{held - tenant.gpu_quota} GPUs of pool {role.pool.name}",
                )
            ]
    return []


def _placement(env: Environment) -> list[Violation]:
    roles = env.role_gangs()
    trainer = roles[0]
    out = []
    for role in roles[1:]:
        if role.pool.name == trainer.pool.name:
            continue  # the same machines: whichever node a role lands on is one of its pool's
        if role.gpus_per_node >= trainer.gpus_per_node:
            out.append(
                Violation(
                    "layout-placement",
                    f"{LAYOUT}.{role.role}.pool",
                    f"pool {role.pool.name} has {role.gpus_per_node} GPUs per node, as many as the trainer's "
                    f"{trainer.gpus_per_node} (pool {trainer.pool.name}): verl 0.9.1 asks Ray for GPUs by count "
                    "only, so the trainer may be placed on its nodes; give the role a pool with fewer GPUs per node, "
                    "or the trainer's pool",
                    f"{role.gpus_per_node - trainer.gpus_per_node + 1} GPUs per node",
                )
            )
    by_role = {r.role: r for r in roles}
    reward, rollout = by_role.get("rewardModel"), by_role["rollout"]
    if reward is not None and reward.pool.name != rollout.pool.name:
        out.append(
            Violation(
                "layout-placement",
                f"{LAYOUT}.rewardModel.pool",
                f"verl 0.9.1 places the reward model's replicas and the rollout's alike (GPU count only): pool "
                f"{reward.pool.name} would hold rollout replicas and pool {rollout.pool.name} reward ones; put the "
                f"reward model on the rollout's pool {rollout.pool.name}",
            )
        )
    return out
