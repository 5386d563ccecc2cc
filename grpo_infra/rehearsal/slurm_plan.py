"""What a rehearsal of a Slurm stack changes to run on the local Slurm sandbox, and nothing else: each change
is a `Substitution` it prints before anything runs.

The stack's own renderers write the sandbox's slurm.conf fragment, gres.conf and sbatch; the sandbox's slurmctld
and slurmds run them, and the sbatch runs as rendered: its partition, node count and GRES request, its port
block, image guard, readiness barrier, crash retry budget and resume rule. What cannot be here is substituted:
- the job's pool keeps at most `MAX_GPU_NODES` of its own hosts (its first names), the gang and the tenants'
  quotas shrink with it, the other pools and the switches naming hosts not kept go;
- its GPUs are the sandbox's placeholder device files (`slurm.gres.files`), as NVML would find none;
- each node's CPUs become the sandbox node's (one socket of 4 cores), the job asking for all of them as it
  asked for the pool's;
- the container runtime runs nothing: every step runs on the host, in this machine's Python environment,
  which stands in for the image (the guard still holds it to `image.contents`, but for the Python minor, the
  CUDA driver floor, flash-attn and the nccl-tests this machine has not);
- the fabric (HCAs, its interface) is the sandbox's plain link, the fabric gate gloo across nodes;
- verl's entrypoint is the probe (`GRPO_ENTRYPOINT`), the checkpoint directory the sandbox's shared one;
- no slurmdbd: the QOS quota is not enforced; nothing is deployed; the stack's secrets get throwaway values.
"""

from __future__ import annotations

import sys
from typing import Any

import hostlist

from ..spec import Environment
from ..spec.image import VERL_DEFAULT_ATTENTION
from .plan import MAX_GPU_NODES, PROBE, Rehearsal, Substitution, shrunk_quotas

# The sandbox's own paths and shape (grpo_infra/sandbox/plan.py ROOT; stacks/Pulumi.local-slurm.yaml).
SANDBOX_ROOT = "/run/grpo-sandbox"
SANDBOX_INTERFACE = "eth0"
SANDBOX_CORES = 4
SANDBOX_MEMORY_GIB = 6


def slurm_rehearsal(stack: str, env: Environment) -> Rehearsal:
    """The Slurm stack shrunk and substituted as the module docstring says."""
    if env.disaggregated:
        raise ValueError(
            "a disaggregated Slurm stack is rehearsed by the sandbox itself (`grpo-infra sandbox up --stack STACK`)"
        )
    data = env.model_dump(by_alias=True, exclude_none=True, mode="json")
    subs = [*_shrink(env, data), *_machines(env, data), *_image(env, data), *_job(stack, env, data)]
    subs += _services(env, data)
    data.pop("launchers", None)
    data["description"] = f"Rehearsal of {stack}: {env.description}"[:200]
    return Rehearsal(stack, Environment.model_validate(data), tuple(subs))


def _shrink(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    pool = env.gang.pool
    kept = pool.host_names[: min(pool.node_count, MAX_GPU_NODES)]
    subs = []
    if len(env.pools) > 1:
        data["pools"] = [p for p in data["pools"] if p["name"] == pool.name]
        gone = ", ".join(p.name for p in env.pools if p.name != pool.name)
        subs.append(Substitution("pools", gone, "not rehearsed (the job runs on its own pool)"))
    raw = data["pools"][0]
    if kept != pool.host_names:
        raw["hosts"] = str(hostlist.collect_hostlist(kept))
        subs.append(Substitution(f"pool {pool.name} hosts", raw_hosts(pool.hosts), f"{raw['hosts']} (sandbox nodes)"))
    if env.job.nodes is not None and env.job.nodes > len(kept):
        data["job"]["nodes"] = len(kept)
        subs.append(Substitution("job.nodes (the gang)", str(env.job.nodes), str(len(kept))))
    job_gpus = (env.gang.world_size, min(env.gang.nodes, len(kept)) * pool.gpu.per_node)
    shrunk = shrunk_quotas(env, job_gpus, len(kept) * pool.gpu.per_node)
    for tenant in data["tenants"]:
        quota = shrunk[tenant["name"]]
        if quota != tenant["gpuQuota"]:
            subs.append(Substitution(f"tenant {tenant['name']} gpuQuota", str(tenant["gpuQuota"]), str(quota)))
            tenant["gpuQuota"] = quota
    slurm = data["slurm"]
    if slurm.get("switches"):
        slurm.pop("switches")
        subs.append(Substitution("slurm.switches", "the stack's fabric tree", "none (the sandbox is one link)"))
    slurm["nodeLayouts"] = [n for n in slurm.get("nodeLayouts", []) if n["pool"] == pool.name]
    return subs


def raw_hosts(hosts: str | None) -> str:
    return hosts or "(none)"


def _machines(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    """GPUs as placeholder device files; each node's CPUs and memory the sandbox node's; the plain link."""
    pool, raw, slurm = env.gang.pool, data["pools"][0], data["slurm"]
    subs = []
    if env.slurm is not None and env.slurm.gres.files is None:
        slurm["gres"] = {"files": f"{SANDBOX_ROOT}/dev/nvidia[0-{pool.gpu.per_node - 1}]"}
        subs.append(Substitution("GPUs", "NVML autodetection", f"{pool.gpu.per_node} placeholder device files"))
    if (pool.cpus, pool.memory_gib) != (SANDBOX_CORES, SANDBOX_MEMORY_GIB):
        raw["cpus"], raw["memoryGib"] = SANDBOX_CORES, SANDBOX_MEMORY_GIB
        raw.pop("kernelMemoryGib", None)
        for layout in slurm.get("nodeLayouts", []):
            layout.update(sockets=1, coresPerSocket=SANDBOX_CORES, threadsPerCore=1, memSpecLimitMib=512)
        subs.append(
            Substitution(
                f"pool {pool.name} node",
                f"{pool.cpus} CPUs, {pool.memory_gib} GiB",
                f"{SANDBOX_CORES} CPUs, {SANDBOX_MEMORY_GIB} GiB (the job still asks for the whole node)",
            )
        )
    if pool.fabric.kind != "none":
        raw["fabric"] = {"kind": "none"}
        subs.append(Substitution("fabric", f"{pool.fabric.kind} ({len(pool.fabric.hcas)} HCAs)", "none"))
    if env.slurm is not None and env.slurm.interface != SANDBOX_INTERFACE:
        slurm["interface"] = SANDBOX_INTERFACE
        subs.append(Substitution("slurm.interface", env.slurm.interface, f"{SANDBOX_INTERFACE} (the sandbox's link)"))
    return subs


def _image(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    """No container: the host's Python environment is the image, held to the stack's declared versions."""
    assert env.slurm is not None
    subs = []
    container = data["slurm"]["container"]
    if env.slurm.container.runtime != "none":
        data["slurm"]["container"] = {"runtime": "none"}
        subs.append(
            Substitution(
                "image",
                f"{env.image.ref or container.get('image')} ({env.slurm.container.runtime})",
                "this machine's Python environment, on the host",
            )
        )
    contents = data["image"]["contents"]
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if contents["python"] != here:
        subs.append(Substitution("image.contents.python", contents["python"], here))
        contents["python"] = here
    if contents.get("ncclTests"):
        contents["ncclTests"] = False
        subs.append(Substitution("image.contents.ncclTests", "true", "false (no nccl-tests on the host)"))
    if contents.get("cuda"):
        subs.append(
            Substitution("image.contents.cuda", contents.pop("cuda"), "none (the sandbox has no NVIDIA driver)")
        )
    if contents.get("attention", VERL_DEFAULT_ATTENTION) != "sdpa":
        was = contents.get("attention", VERL_DEFAULT_ATTENTION)
        contents["attention"] = "sdpa"
        subs.append(Substitution("image.contents.attention", was, "sdpa (no flash-attn on the host)"))
    for key in ("rdma", "efa"):
        contents.pop(key, None)
    data["image"].pop("build", None)
    data["image"].pop("ref", None)
    return subs


def _job(stack: str, env: Environment, data: dict[str, Any]) -> list[Substitution]:
    job = data["job"]
    subs = [Substitution("entrypoint", "verl (main_ppo)", f"the probe, {PROBE['steps']} checkpointed steps")]
    job["probe"] = dict(PROBE)
    checkpoints = f"{SANDBOX_ROOT}/shared/rehearsal-{stack}/checkpoints"
    subs.append(Substitution("job.checkpoint.dir", env.job.checkpoint.dir, checkpoints))
    job["checkpoint"]["dir"] = checkpoints
    nccl = env.job.preflight.nccl
    if nccl.enabled and nccl.backend != "gloo":
        job.setdefault("preflight", {})["nccl"] = {"backend": "gloo", "sizeMib": 16, "iterations": 5}
        subs.append(Substitution("fabric gate", f"{nccl.backend} (nccl-tests)", "gloo across nodes, CPU tensors"))
    data["slurm"]["sharedPaths"] = ["/"]
    data["slurm"]["checkpointSaveSeconds"] = 60
    return subs


def _services(env: Environment, data: dict[str, Any]) -> list[Substitution]:
    assert env.slurm is not None
    slurm = data["slurm"]
    subs = []
    if env.slurm.accounting != "none":
        slurm["accounting"] = "none"
        subs.append(
            Substitution(
                "slurm.accounting", env.slurm.accounting, "none (the sandbox runs no slurmdbd: quotas not enforced)"
            )
        )
    if env.slurm.deploy is not None and env.slurm.deploy.directory != f"{SANDBOX_ROOT}/deploy":
        slurm["deploy"] = {"directory": f"{SANDBOX_ROOT}/deploy", "reconfigure": False}
        subs.append(Substitution("slurm.deploy", env.slurm.deploy.directory, "the sandbox's own files"))
    subs += [
        Substitution(f"secret {s.config}", "the stack's encrypted value", "a throwaway value") for s in env.job.secrets
    ]
    return subs
