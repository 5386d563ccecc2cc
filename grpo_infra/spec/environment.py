"""The whole environment: one per stack file, and the gang it derives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import hostlist
from pydantic import Field, model_validator

from .base import SpecModel
from .checks import Checks
from .image import Image
from .job import Job
from .kubernetes import Kubernetes
from .launchers import Launchers
from .layout import Disaggregated, RoleGang
from .pools import Pool
from .slurm import Slurm
from .strings import FreeText
from .tenants import Tenant


class Environment(SpecModel):
    """One environment a platform team owns: a Kubernetes cluster or a Slurm cluster."""

    target: Literal["kubernetes", "slurm"]
    """Which scheduler runs the gang: a Kubernetes cluster (KubeRay + Kueue) or a Slurm cluster."""
    description: FreeText = ""
    """One line for people: what this environment is."""
    kubernetes: Kubernetes | None = None
    slurm: Slurm | None = None
    pools: list[Pool] = Field(min_length=1)
    tenants: list[Tenant] = Field(min_length=1)
    image: Image
    """The job's container image and what it holds (docs/images.md)."""
    job: Job
    launchers: Launchers | None = None
    """Launch paths rendered besides the target: Ray by hand, SkyPilot, dstack (docs/launchers.md)."""
    checks: Checks = Field(default_factory=Checks)
    """Rules of `check` this stack waives, each with its reason (docs/check.md, "Waivers")."""

    @model_validator(mode="after")
    def _target_block(self) -> Environment:
        other = "slurm" if self.target == "kubernetes" else "kubernetes"
        if getattr(self, self.target) is None:
            raise ValueError(f"target {self.target} needs a `{self.target}` block")
        if getattr(self, other) is not None:
            raise ValueError(f"target {self.target} takes no `{other}` block")
        return self

    @model_validator(mode="after")
    def _waivers_fit_target(self) -> Environment:
        problem = self.checks.off_target(self.target)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Environment:
        for what, names in (("pool", [p.name for p in self.pools]), ("tenant", [t.name for t in self.tenants])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} name {dupes[0]} is used twice")
        return self

    @model_validator(mode="after")
    def _pools_fit_target(self) -> Environment:
        for i, pool in enumerate(self.pools):
            where = f"pools[{i}] ({pool.name})"
            provider = self.kubernetes.provider if self.kubernetes else "slurm"
            if provider in ("existing", "slurm") and pool.hosts is None:
                raise ValueError(f"{where}: a {provider} cluster's pool names its machines with `hosts`")
            if provider in ("eks", "gke") and pool.nodes is None:
                raise ValueError(f"{where}: an {provider} pool is sized with `nodes`, not `hosts`")
            for cloud in ("eks", "gke"):
                if provider == cloud and getattr(pool, cloud) is None:
                    raise ValueError(f"{where}: an {cloud} cluster's pool needs an `{cloud}` block")
                if provider != cloud and getattr(pool, cloud) is not None:
                    raise ValueError(f"{where}: `{cloud}` is only for an {cloud} cluster, this one is {provider}")
            if provider != "existing" and pool.existing is not None:
                raise ValueError(f"{where}: `existing` is only for an existing cluster, this one is {provider}")
        if self.target == "slurm":
            owner: dict[str, str] = {}
            for i, pool in enumerate(self.pools):
                for host in pool.host_names:
                    if host in owner:
                        # The later pool is the one a user just added or widened: name its field.
                        raise ValueError(f"pools[{i}].hosts: {host} is already a host of pool {owner[host]}")
                    owner[host] = pool.name
        return self

    @model_validator(mode="after")
    def _gres_files_match_gpus(self) -> Environment:
        """gres.conf's device files must name exactly the widest pool's GPUs (a narrower pool's nodes take the
        first `gpu.perNode` of them: grpo_infra/slurmgen/conf.py), or slurmd drains the node."""
        if self.slurm is None or self.slurm.gres.files is None:
            return self
        try:
            found = len(hostlist.expand_hostlist(self.slurm.gres.files))
        except hostlist.BadHostlist as exc:
            raise ValueError(f"slurm.gres.files is not a device pattern such as /dev/nvidia[0-7] ({exc})") from None
        widest = max(self.pools, key=lambda p: p.gpu.per_node)
        if found != widest.gpu.per_node:
            raise ValueError(
                f"slurm.gres.files {self.slurm.gres.files} names {found} devices, "
                f"but pool {widest.name} has gpu.perNode {widest.gpu.per_node}"
            )
        return self

    @model_validator(mode="after")
    def _switches_name_known_hosts(self) -> Environment:
        """topology.conf may only name the pools' hosts."""
        if self.slurm is None or not self.slurm.switches:
            return self
        hosts = {h for p in self.pools for h in p.host_names}
        for i, switch in enumerate(self.slurm.switches):
            where = f"slurm.switches[{i}] ({switch.name})"
            if switch.nodes is not None:
                try:
                    cabled = hostlist.expand_hostlist(switch.nodes)
                except hostlist.BadHostlist as exc:
                    raise ValueError(f"{where}: `nodes` is not a Slurm hostlist ({exc})") from None
                stray = [h for h in cabled if h not in hosts]
                if stray:
                    raise ValueError(f"{where}: {stray[0]} is not a host of any pool")
        return self

    @model_validator(mode="after")
    def _job_references(self) -> Environment:
        names = ", ".join(p.name for p in self.pools)
        layout = self.job.layout
        if isinstance(layout, Disaggregated):
            held: dict[str, int] = {}
            for role, share in layout.roles():
                where = f"job.layout.{role}"
                role_pool = next((p for p in self.pools if p.name == share.pool), None)
                if role_pool is None:
                    raise ValueError(f"{where}.pool {share.pool!r} is not a pool; pools: {names}")
                held[share.pool] = held.get(share.pool, 0) + share.nodes
                if held[share.pool] > role_pool.node_count:
                    raise ValueError(
                        f"{where}.nodes {share.nodes}: pool {share.pool} has {role_pool.node_count} nodes and the "
                        f"roles on it ask for {held[share.pool]}"
                    )
        pool = next((p for p in self.pools if p.name == self.gang_pool_name), None)
        if pool is None:
            raise ValueError(f"job.pool {self.job.pool!r} is not a pool; pools: {names}")
        tenant = next((t for t in self.tenants if t.name == self.job.tenant), None)
        if tenant is None:
            names = ", ".join(t.name for t in self.tenants)
            raise ValueError(f"job.tenant {self.job.tenant!r} is not a tenant; tenants: {names}")
        if self.job.nodes is not None and self.job.nodes > pool.node_count:
            raise ValueError(f"job.nodes {self.job.nodes} is more than pool {pool.name} has ({pool.node_count})")
        quota = sum(t.gpu_quota for t in self.tenants)
        capacity = sum(p.gpu_count for p in self.pools)
        if quota > capacity:
            # The pools describe machines that exist; the quotas are what a platform team divides among them.
            raise ValueError(
                f"tenants[].gpuQuota: tenant GPU quotas add up to {quota}, more than the pools' {capacity} GPUs"
            )
        return self

    @model_validator(mode="after")
    def _kubernetes_needs(self) -> Environment:
        """Kubernetes-only settings stay off Slurm stacks; the node reserve leaves room to run."""
        if self.kubernetes is None:
            if self.job.checkpoint.volume is not None:
                raise ValueError("job.checkpoint.volume is for Kubernetes; on Slurm `checkpoint.dir` is already shared")
            return self
        reserve = self.kubernetes.node_reserve
        for key, attr, unit in (("cpus", "cpus", "CPUs"), ("memoryGib", "memory_gib", "GiB")):
            kept = getattr(reserve, attr)
            short = [(i, p) for i, p in enumerate(self.pools) if kept >= getattr(p, attr)]
            if not short:
                continue
            i, pool = short[0]
            has = getattr(pool, attr)
            # A reserve no pool can give is the reserve's mistake; one that other pools give leaves this pool
            # (or the only pool) with a node size nobody has, such as `memoryGib: 1`: name that field first.
            if len(self.pools) > 1 and len(short) == len(self.pools):
                raise ValueError(
                    f"kubernetes.nodeReserve.{key} {kept:g} keeps back all of every pool's nodes "
                    f"(the largest has {max(getattr(p, attr) for p in self.pools):g} {unit}); lower it"
                )
            raise ValueError(
                f"pools[{i}].{key} {has:g} (pool {pool.name}) leaves nothing once kubernetes.nodeReserve.{key} "
                f"keeps back {kept:g} {unit} per node: give the node's real size, or lower the reserve"
            )
        return self

    @model_validator(mode="after")
    def _image_reachable(self) -> Environment:
        """Pods and containerized Slurm steps pull `image.ref`; only Slurm without a container runtime runs without one."""
        needs_ref = self.slurm is None or (
            self.slurm.container.runtime != "none" and self.slurm.container.image is None
        )
        if needs_ref and self.image.ref is None:
            raise ValueError("image.ref is required: the registry reference the job's pods or containers pull")
        return self

    @property
    def gang_pool_name(self) -> str:
        """The pool of the training gang: `job.pool`, or the trainer's pool of a disaggregated job."""
        layout = self.job.layout
        if isinstance(layout, Disaggregated):
            return layout.trainer.pool
        assert self.job.pool is not None
        return self.job.pool

    @property
    def gang(self) -> Gang:
        """The training gang: every role of a colocated job, the trainer of a disaggregated one."""
        return Gang.of(self)

    @property
    def disaggregated(self) -> bool:
        return isinstance(self.job.layout, Disaggregated)

    def role_gangs(self) -> list[RoleGang]:
        """Each role of a disaggregated job on its pool, trainer first; empty for a colocated job."""
        layout = self.job.layout
        if not isinstance(layout, Disaggregated):
            return []
        return [RoleGang(role, self.pool(share.pool), share.nodes) for role, share in layout.roles()]

    @property
    def job_nodes(self) -> int:
        """GPU nodes the job holds at once, every role's."""
        roles = self.role_gangs()
        return sum(r.nodes for r in roles) if roles else self.gang.nodes

    @property
    def job_gpus(self) -> int:
        """GPUs the job holds at once, every role's."""
        roles = self.role_gangs()
        return sum(r.world_size for r in roles) if roles else self.gang.world_size

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)

    def tenant(self, name: str) -> Tenant:
        return next(t for t in self.tenants if t.name == name)


@dataclass(frozen=True)
class Gang:
    """What the job needs all at once: derived from the pool, never typed twice."""

    pool: Pool
    nodes: int
    gpus_per_node: int

    @classmethod
    def of(cls, env: Environment) -> Gang:
        pool = env.pool(env.gang_pool_name)
        layout = env.job.layout
        nodes = layout.trainer.nodes if isinstance(layout, Disaggregated) else env.job.nodes or pool.node_count
        return cls(pool=pool, nodes=nodes, gpus_per_node=pool.gpu.per_node)

    @property
    def world_size(self) -> int:
        """GPUs in the gang: verl's trainer.nnodes × trainer.n_gpus_per_node."""
        return self.nodes * self.gpus_per_node
