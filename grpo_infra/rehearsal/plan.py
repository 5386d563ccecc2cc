"""What a rehearsal changes in a stack, and nothing else: each change is a `Substitution` it prints.

A rehearsal runs the stack's own rendered objects on this machine's real nodes. What cannot be here is
substituted, each once and said:
- node counts shrink to at most `MAX_GPU_NODES` per pool, and the gang (a disaggregated job's every role)
  and the tenants' GPU quotas with them (a constraint is never dropped: every label, taint, device count and selector stays);
- the image becomes its CPU variant, built from the stack's own lock (`grpo-infra image build`), its guard
  still holding the GPU nodes to the declared image's driver floor;
- verl's entrypoint becomes the probe (every rank's placement, checkpointed steps, resume), and the fabric
  gate, whose all-reduce needs torch, is off;
- cloud storage (claims, NFS) becomes host paths on the nodes, the checkpoint path shared by all;
- the operators install from the bundled copies of the same charts (their repositories are out of reach);
- the pools' GPU and fabric resources come from the local nodes' device plugin, not from the cloud's;
- the stack's secrets get throwaway values;
- node pools are not created (the local nodes are the pools' nodes), launchers are not rendered.
The CPU and memory arithmetic is kept, scaled: see scale.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import verl
from ..kube import netpolicy
from ..spec import Environment

MAX_GPU_NODES = 2
# Every rehearsal path on the nodes (they are all this machine, so each is shared by every node).
HOST_ROOT = "/var/lib/grpo-rehearsal"
PROBE = {"steps": 3, "stepSeconds": 1}
CRON_SCHEDULE = "* * * * *"


@dataclass(frozen=True)
class Substitution:
    """One thing the rehearsal runs in place of the stack's own."""

    what: str
    stack: str
    rehearsal: str

    def line(self) -> str:
        return f"{self.what}: {self.stack} -> {self.rehearsal}"


@dataclass(frozen=True)
class Rehearsal:
    """The stack as it is rehearsed, and what was substituted to make it so."""

    stack: str
    env: Environment
    substitutions: tuple[Substitution, ...]


def rehearsal(stack: str, env: Environment) -> Rehearsal:
    """The Kubernetes stack shrunk and substituted as the module docstring says (a Slurm stack's: slurm_plan.py)."""
    if env.kubernetes is None:
        raise ValueError(f"stack {stack} targets {env.target}: this rehearsal runs Kubernetes stacks")
    data = env.model_dump(by_alias=True, exclude_none=True, mode="json")
    subs: list[Substitution] = []
    subs += _shrink(env, data)
    subs += _image(env, data)
    subs += _storage(env, data)
    subs += _cluster_services(env, data)
    subs += _secrets(env)
    subs += _waivers(data)
    subs += _schedule(env, data)
    data.pop("launchers", None)
    data["description"] = f"Rehearsal of {stack}: {env.description}"[:200]
    return Rehearsal(stack, Environment.model_validate(data), tuple(subs))


def _shrink(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    """At most MAX_GPU_NODES per pool; the gang shrinks with its pool, and every tenant's quota with the gang."""
    subs = []
    for pool, raw in zip(env.pools, data["pools"], strict=True):
        size = pool.node_count
        kept = min(size, MAX_GPU_NODES)
        if kept == size:
            continue
        if pool.host_names:
            raw["hosts"] = ",".join(pool.host_names[:kept])
        else:
            raw["nodes"] = kept
        subs.append(Substitution(f"pool {pool.name} nodes", str(size), f"{kept} (at most {MAX_GPU_NODES} per pool)"))
    gang_before = env.gang.nodes
    gang_after = min(gang_before, MAX_GPU_NODES)
    if env.job.nodes is not None and gang_after != env.job.nodes:
        data["job"]["nodes"] = gang_after
        subs.append(Substitution("job.nodes (the gang)", str(env.job.nodes), str(gang_after)))
    subs += _shrink_roles(env, data)
    quotas = shrunk_quotas(env, _job_gpus(env, data, gang_after))
    for tenant, raw in zip(env.tenants, data["tenants"], strict=True):
        quota = quotas[tenant.name]
        if quota != tenant.gpu_quota:
            raw["gpuQuota"] = quota
            subs.append(Substitution(f"tenant {tenant.name} gpuQuota", str(tenant.gpu_quota), str(quota)))
    return subs


def _shrink_roles(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    """A disaggregated job's roles shrink with their pools: each keeps its nodes up to what its pool has
    left after the roles before it (a role left with none cannot be rehearsed)."""
    subs = []
    left = {p.name: min(p.node_count, MAX_GPU_NODES) for p in env.pools}
    for role in env.role_gangs():
        kept = min(role.nodes, left[role.pool.name])
        if kept == 0:
            raise ValueError(
                f"job.layout.{role.role}: pool {role.pool.name} keeps {MAX_GPU_NODES} nodes in a rehearsal and the "
                "roles before it hold them all"
            )
        left[role.pool.name] -= kept
        if kept != role.nodes:
            data["job"]["layout"][role.role]["nodes"] = kept
            subs.append(Substitution(f"job.layout.{role.role}.nodes", str(role.nodes), str(kept)))
    return subs


def _job_gpus(env: Environment, data: dict[str, Any], gang_after: int) -> tuple[int, int]:
    """The GPUs the job holds at once, (before, after) the shrink: every role's, or the gang's."""
    if not env.disaggregated:
        return env.gang.world_size, gang_after * env.gang.gpus_per_node
    after = sum(data["job"]["layout"][r.role]["nodes"] * r.gpus_per_node for r in env.role_gangs())
    return env.job_gpus, after


def shrunk_quotas(env: Environment, job_gpus: tuple[int, int], after: int | None = None) -> dict[str, int]:
    """Each tenant's GPU quota on the shrunk pools (`after` GPUs; by default every pool at MAX_GPU_NODES): the
    job's tenant keeps the share of the job it had (never less than the shrunk job's GPUs, which it must
    admit), the others scale with the pools' GPUs, and together they fit the shrunk pools, as the spec
    demands of any stack."""
    before = sum(p.node_count * p.gpu.per_node for p in env.pools)
    if after is None:
        after = sum(min(p.node_count, MAX_GPU_NODES) * p.gpu.per_node for p in env.pools)
    job_before, job_after = job_gpus
    own = env.job.tenant
    quotas = {own: min(after, max(job_after, math.ceil(env.tenant(own).gpu_quota * job_after / job_before)))}
    left = after - quotas[own]
    for tenant in env.tenants:
        if tenant.name != own:
            quotas[tenant.name] = min(left, tenant.gpu_quota * after // before)
            left -= quotas[tenant.name]
    return quotas


def _image(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    subs = []
    if env.image.variant != "cpu":
        data["image"]["variant"] = "cpu"
        subs.append(
            Substitution(
                "image", env.image.ref or "(no ref)", "its CPU variant from the stack's lock (`grpo-infra image build`)"
            )
        )
    job = data["job"]
    if env.job.probe is None:
        job["probe"] = dict(PROBE)
        verl_module = verl.entrypoint(env)[-1].rsplit(".", 1)[-1]  # main_ppo, or fully_async_main
        subs.append(
            Substitution("entrypoint", f"verl ({verl_module})", f"the probe, {PROBE['steps']} checkpointed steps")
        )
    if env.job.preflight.nccl.enabled:
        job.setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False
        subs.append(Substitution("fabric gate", "on (nccl-tests all-reduce)", "off (the CPU variant has no torch)"))
    return subs


def _schedule(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    """A RayCronJob ticks every minute, so that a rehearsal sees a tick (rehearsal/kinds.py follows the first)."""
    cron = env.kubernetes.ray_cron_job if env.kubernetes is not None else None
    if env.job.kind != "raycronjob" or cron is None:
        return []
    raw = data["kubernetes"]["rayCronJob"]
    raw.update(schedule=CRON_SCHEDULE, suspend=False)
    raw.pop("timeZone", None)
    zone = f" ({cron.time_zone})" if cron.time_zone else ""
    paused = ", suspended" if cron.suspend else ""
    return [
        Substitution(
            "schedule",
            f"{cron.schedule}{zone}{paused}",
            f"every minute ({CRON_SCHEDULE}); the first tick's run followed",
        )
    ]


def _storage(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    assert env.kubernetes is not None
    subs = []
    volumes = data["kubernetes"].get("volumes", [])
    # Every volume becomes a directory of the rehearsal's own, made empty before and removed after: a host path
    # the stack names (local-k8s's /var/lib/grpo-*) is this machine's, which a rehearsal does not touch.
    for volume, raw in zip(env.kubernetes.volumes, volumes, strict=True):
        path = f"{HOST_ROOT}/{volume.name}"
        source = (
            f"host path {volume.host_path}"
            if volume.host_path
            else f"claim {volume.claim_name}"
            if volume.claim_name
            else "NFS"
            if volume.nfs
            else "its volume"
        )
        for key in ("claimName", "nfs"):
            raw.pop(key, None)
        raw["hostPath"] = path
        subs.append(Substitution(f"volume {volume.name}", source, f"host path {path} (read-only stays as declared)"))
    checkpoint = env.job.checkpoint.volume
    if checkpoint is not None:
        path = f"{HOST_ROOT}/checkpoints"
        source = f"host path {checkpoint.host_path}" if checkpoint.host_path else "shared storage"
        data["job"]["checkpoint"]["volume"] = {"hostPath": path, "hostPathShared": True}
        subs.append(Substitution("checkpoint volume", source, f"host path {path}, shared by every node"))
    return subs


def _cluster_services(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    assert env.kubernetes is not None
    subs = []
    kube = data["kubernetes"]
    if env.kubernetes.operator_charts != "bundled":
        kube["operatorCharts"] = "bundled"
        subs.append(
            Substitution("operator charts", "their Helm repositories", "the bundled copies of the same versions")
        )
    provided = set(env.kubernetes.provided_resources)
    local = {pool.gpu.resource for pool in env.pools} | {p.fabric.resource for p in env.pools if p.fabric.resource}
    if not local <= provided:
        kube["providedResources"] = sorted(provided | local)
        subs.append(
            Substitution(
                "device plugins",
                "installed by the stack",
                "the local nodes' device plugin (" + ", ".join(sorted(local - provided)) + ")",
            )
        )
    if env.kubernetes.provider != "existing":
        subs.append(
            Substitution("node pools", f"{env.kubernetes.provider} node groups", "the local real nodes, not created")
        )
    subs.append(
        Substitution(
            "NetworkPolicy enforcement",
            "the cluster's network plugin",
            f"{netpolicy.version()} on every local node, tried from other namespaces once the job runs",
        )
    )
    return subs


def _secrets(env: Environment) -> list[Substitution]:
    return [
        Substitution(f"secret {s.config}", "the stack's encrypted value", "a throwaway value") for s in env.job.secrets
    ]


# The checks a rehearsal must waive, each for a substitution above (docs/check.md lists them).
WAIVED = {"image-variant-gpus": "a rehearsal: the local GPU nodes run no CUDA, the CPU variant stands in for the image"}


def _waivers(data: dict[str, Any]) -> list[Substitution]:
    waive = data.setdefault("checks", {}).setdefault("waive", [])
    have = {w["rule"] for w in waive}
    subs = []
    for rule, reason in WAIVED.items():
        if rule not in have:
            waive.append({"rule": rule, "reason": reason})
            subs.append(Substitution(f"check {rule}", "an error", "waived: " + reason))
    return subs
