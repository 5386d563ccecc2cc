"""The GRPO sbatch script: the exact gang, a job-private Ray cluster, a readiness barrier, verl.

The Ray node lifecycle (ports, address, start, barrier, stop) is grpo_infra/lifecycle's library, embedded
whole; `templates/grpo_job.sh.j2` holds how the steps run on the allocation, `templates/grpo.sbatch.j2` the job.

Every value the script needs is computed here and shell-quoted; the template only lays it out.
The script takes the gang's shape from the allocation at run time (SLURM_JOB_NUM_NODES,
SLURM_GPUS_ON_NODE), so verl's `trainer.nnodes` / `trainer.n_gpus_per_node` always match what
Slurm granted, even when a user overrides `--nodes` or `--gres` on the sbatch command line.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .. import debug, training, verl
from ..deadline import EXPIRATION_VARIABLE
from ..fabric import nccl_env
from ..image import container_image, guard_program, slurm_guard_args
from ..lifecycle.ray_node import (
    DEFAULT_READY_TIMEOUT_S,
    READY_PROGRAM,
    STOP_ORDER_PROGRAM,
    PortVar,
    library,
    port_vars,
)
from ..ports import WORKER_OFFSET, block_count
from ..preflight.gate import MODULE as GATE_MODULE
from ..preflight.gate import GateSettings, gate_settings
from ..preflight.ray_allreduce import WARMUP_ITERATIONS
from ..spec import Environment
from ..spec.layout import pool_resource
from ..spec.slurm import Container
from ..watchdog import watchdog_env
from .conf import gres_request
from .templates import render_template

# The lifecycle's names the launchers and tests take from here too.
__all__ = ["DEFAULT_READY_TIMEOUT_S", "READY_PROGRAM", "PortVar", "port_vars", "sbatch", "single_quoted"]

# Seconds before the time limit at which Slurm sends USR1 to the batch shell (stop Ray, requeue).
SIGNAL_BEFORE_LIMIT_S = 120
# Shell variables holding the allocation's shape, substituted for the two derived overrides.
NNODES_VAR = "SLURM_JOB_NUM_NODES"
GPUS_PER_NODE_VAR = "gpus_per_node"
# The fabric verdict on nccl-tests output; the job's Python must import grpo_infra (docs/slurm.md).
VERDICT_COMMAND = ("python3", "-m", "grpo_infra.cli", "nccl", "verdict")
# Options of the in-job gate that `grpo-infra nccl verdict` takes too, with the same meaning.
VERDICT_OPTIONS = frozenset({"--fabric", "--gpus-per-node", "--nodes", "--expected-busbw", "--fraction"})
# Gate options whose value is the allocation's shape at run time, as for verl's overrides.
ALLOCATION_OPTIONS = {"--nodes": f'"${NNODES_VAR}"', "--gpus-per-node": f'"${GPUS_PER_NODE_VAR}"'}


def verl_words(env: Environment) -> list[str]:
    """verl's argv as shell words, the gang's shape read from the allocation instead of the spec."""
    allocation = {verl.NNODES: f'"${NNODES_VAR}"', verl.N_GPUS_PER_NODE: f'"${GPUS_PER_NODE_VAR}"'}
    words = [shlex.quote(w) for w in verl.entrypoint(env)]
    for (key, _), arg in zip(verl.overrides(env), verl.override_args(verl.overrides(env)), strict=True):
        words.append(f"{key}={allocation[key]}" if key in allocation else shlex.quote(arg))
    return words


def gate_words(settings: GateSettings, options: frozenset[str] | None = None) -> list[str]:
    """`gate_settings(env).argv()` as shell words (only `options` when given), the gang's shape from the allocation."""
    argv = settings.argv()
    words: list[str] = []
    for option, value in zip(argv[::2], argv[1::2], strict=True):
        if options is None or option in options:
            words += [option, ALLOCATION_OPTIONS.get(option) or shlex.quote(value)]
    return words


@dataclass(frozen=True)
class FabricGate:
    """The fabric gate as the sbatch runs it: nccl-tests before Ray (nccl) or the Ray program after the barrier (gloo)."""

    enabled: bool
    backend: str
    log_name: str
    timeout_seconds: int
    size_mib: int
    iterations: int
    mpi: str
    all_reduce_perf: list[str]
    """nccl-tests argv: one size (`sizeMib`), `iterations` timed runs, one GPU per process (-g 1)."""
    verdict: list[str]
    """`grpo-infra nccl verdict` on the nccl-tests output read from stdin."""
    ray_program: list[str]
    """`python3 -m grpo_infra.preflight.ray_allreduce <gate_settings(env).argv()>`."""


def fabric_gate(env: Environment) -> FabricGate:
    """Every value of the gate comes from `gate_settings(env)`, the one derivation both targets use."""
    settings = gate_settings(env)
    spec = env.job.preflight.nccl
    size = f"{settings.size_mib}M"
    perf = [shlex.quote(spec.all_reduce_perf), "-b", size, "-e", size, "-g", "1"]
    perf += ["-w", str(WARMUP_ITERATIONS), "-n", str(settings.iterations)]
    return FabricGate(
        enabled=settings.enabled,
        backend=settings.backend,
        log_name="all_reduce_perf" if settings.backend == "nccl" else "ray_allreduce",
        timeout_seconds=settings.timeout_seconds,
        size_mib=settings.size_mib,
        iterations=settings.iterations,
        mpi=spec.mpi,
        all_reduce_perf=perf,
        verdict=[*VERDICT_COMMAND, "/dev/stdin", *gate_words(settings, VERDICT_OPTIONS)],
        ray_program=["python3", "-m", GATE_MODULE, *gate_words(settings)],
    )


def job_environment(env: Environment) -> dict[str, str]:
    """Variables exported to every process of the job: the pool's fabric (the rule both targets share),
    with sockets on the stack's interface when the fabric names none; torch's watchdog (grpo_infra/watchdog.py);
    then the spec's `env`."""
    slurm = env.slurm
    assert slurm is not None
    return {**dict(nccl_env(env.gang.pool, slurm.interface)), **dict(watchdog_env(env)), **env.job.env}


# The image's working directory when the stack names none: it exists in every image.
DEFAULT_WORKDIR = "/tmp"
# The enroot container every pyxis step of a job shares on a node; the job id keeps two jobs apart.
CONTAINER_NAME = "grpo-${SLURM_JOB_ID}"


@dataclass(frozen=True)
class ContainerArgs:
    """How a command enters the image: extra srun options (pyxis) or a command prefix (Apptainer)."""

    runtime: str
    srun_args: list[str]
    exec_prefix: list[str]
    named: bool
    """pyxis: every step runs in the node's one named container (`--container-name`), removed at the end."""


def single_quoted(word: str) -> str:
    """A shell word in single quotes, always: keeps commas and `#` of image names out of shellcheck's way."""
    return "'" + word.replace("'", "'\\''") + "'"


def container_args(container: Container, image: str | None) -> ContainerArgs:
    """pyxis: `srun --container-image --container-name ...`; Apptainer: `apptainer exec --nv --no-home ...`.

    `image` is the stack's image in the runtime's syntax (grpo_infra.image.container_image).

    pyxis gives each srun step without `--container-name` a container of its own, removed when the step
    ends (pyxis `srun --help`: "Unnamed containers are removed after the slurm task is complete"), so the
    readiness barrier, the gate and the driver would not see the /tmp where the head's Ray keeps its
    sockets. Every step of the job therefore names the same container; a step that finds it running joins
    its namespaces (pyxis_slurmstepd.c, "reusing existing container namespaces", NVIDIA/pyxis 1075199). NeMo-RL
    does the same for its Ray head and attaches to it by name (NVIDIA-NeMo/RL ray.sub, `--container-name=ray-head`
    and the `srun --overlap --container-name=ray-head` attach command). `--no-container-mount-home` keeps
    the user's ~/.local packages from shadowing the image's, and the working directory is stated (pyxis
    fails a step whose `--container-workdir` is missing in the image: "couldn't chdir").

    Apptainer starts a fresh container for every `apptainer exec`, but binds the host's /tmp into each by
    default (apptainer.org/docs/user/latest/bind_paths_and_mounts.html, "System-defined bind paths"); the
    sbatch also binds the job's Ray temp root explicitly, for sites whose apptainer.conf turns `mount tmp` off.
    """
    mounts = ",".join(container.mounts)
    workdir = container.workdir or DEFAULT_WORKDIR
    if container.runtime == "pyxis":
        assert image is not None
        srun_args = [single_quoted(f"--container-image={image}")]
        if mounts:
            srun_args.append(single_quoted(f"--container-mounts={mounts}"))
        srun_args += [
            single_quoted(f"--container-workdir={workdir}"),
            "--no-container-mount-home",
            '"--container-name=$GRPO_CONTAINER_NAME"',
        ]
        return ContainerArgs("pyxis", srun_args, [], named=True)
    if container.runtime == "apptainer":
        assert image is not None
        prefix = ["apptainer", "exec", "--nv", "--no-home", "--pwd", single_quoted(workdir)]
        if mounts:
            prefix += ["--bind", single_quoted(mounts)]
        prefix += ["--bind", '"$GRPO_RAY_TMP_ROOT"']
        return ContainerArgs("apptainer", [], [*prefix, single_quoted(image)], named=False)
    return ContainerArgs("none", [], [], named=False)


def image_where(container: Container, image: str | None) -> str:
    """Where the job's processes run, for the script's header: the image and its runtime, or the host."""
    if container.runtime == "none" or image is None:
        return "the nodes' own software (no container)"
    runtime = "pyxis, one named container per node" if container.runtime == "pyxis" else "Apptainer"
    return f"the image {image} ({runtime})"


@dataclass(frozen=True)
class Component:
    """One component of the job's allocation (its `#SBATCH` lines): the whole gang of a colocated job, or one
    role's nodes of a disaggregated one, which is a heterogeneous job of a component per role."""

    role: str
    pool: str
    nodes: int
    gres: str
    gpus_per_node: int
    cpus_per_task: int
    constraint: str | None
    """The pool's node feature (grpo_infra/slurmgen/conf.py `pool_features`), when the partition spans several pools."""
    ray_resource: str
    """The Ray resource the component's nodes advertise, one unit per GPU (a disaggregated job's only)."""


def components(env: Environment) -> list[Component]:
    """The allocation's components: one for a colocated job, one per role (trainer first) for a disaggregated one.

    A heterogeneous job is Slurm's own way to hold nodes of different shapes at once: each component has its
    own node count, GRES and constraint, and all components start together or none (Slurm 22.05
    heterogeneous_jobs.html, "all heterogeneous job components are either all scheduled at the same time or
    deferred"). One job over several partitions (`-p a,b`) runs in one of them only, and one GRES request
    applies to every node of a plain job, so neither can hold an 8-GPU trainer node and a 4-GPU rollout node.
    """
    several_pools = len([p for p in env.pools if p.host_names]) > 1
    roles = env.role_gangs()
    if not roles:
        pool = env.gang.pool
        shape = [("gang", pool, env.gang.nodes)]
    else:
        shape = [(r.role, r.pool, r.nodes) for r in roles]
    return [
        Component(
            role=role,
            pool=pool.name,
            nodes=nodes,
            gres=gres_request(pool),
            gpus_per_node=pool.gpu.per_node,
            cpus_per_task=pool.cpus,
            constraint=pool.name if several_pools else None,
            ray_resource=pool_resource(pool.name),
        )
        for role, pool, nodes in shape
    ]


def sbatch(env: Environment) -> str:
    """The sbatch script of the stack's GRPO job."""
    slurm, job, gang = env.slurm, env.job, env.gang
    assert slurm is not None
    tenant = env.tenant(job.tenant)
    return render_template(
        "grpo.sbatch.j2",
        job_name=job.name,
        cluster=slurm.cluster_name,
        partition=slurm.partition,
        account=tenant.name,
        qos=tenant.queue,
        nodes=gang.nodes,
        gpus_per_node=gang.gpus_per_node,
        cpus_per_task=gang.pool.cpus,
        components=components(env),
        exclusive=slurm.oversubscribe == "exclusive",
        oversubscribe=slurm.oversubscribe == "yes",
        time_limit=slurm.time_limit,
        signal_secs=SIGNAL_BEFORE_LIMIT_S,
        interface=shlex.quote(slurm.interface),
        interface_name=slurm.interface,
        image_where=image_where(slurm.container, container_image(env)),
        port_start=slurm.ray_ports.start,
        port_end=slurm.ray_ports.end,
        port_blocks=block_count(slurm.ray_ports.start, slurm.ray_ports.end, gang.pool.ray_block_size),
        block_size=gang.pool.ray_block_size,
        worker_offset=WORKER_OFFSET,
        lifecycle=library(
            slurm.ray_ports,
            env.gang.pool.ray_block_size,
            dashboard_default=0,
            debug_start_args=debug.ray_start_args(env),
        ),
        ready_timeout=DEFAULT_READY_TIMEOUT_S,
        exports=[(name, single_quoted(value)) for name, value in job_environment(env).items()],
        secrets=[s.env for s in job.secrets],
        checkpoint_dir=shlex.quote(job.checkpoint.dir),
        resume=job.checkpoint.resume,
        # The experiment the checkpoint directory must belong to (grpo_infra/lifecycle/resume.py).
        identity=single_quoted(training.identity_json(env)),
        verl_words=verl_words(env),
        container=container_args(slurm.container, container_image(env)),
        gate=fabric_gate(env),
        ray_auth=slurm.ray_auth,
        debug=debug_settings(env),
        container_name=CONTAINER_NAME,
        checkpoint_save_secs=slurm.checkpoint_save_seconds,
        expiration_variable=EXPIRATION_VARIABLE,
        save_freq=job.checkpoint.save_freq,
        retries=slurm.retries,
        image_guard_program=guard_program().rstrip("\n"),
        stop_order_program=STOP_ORDER_PROGRAM.read_text(encoding="utf-8").rstrip("\n"),
        image_guard_args=[single_quoted(a) for a in slurm_guard_args(env)],
    )


# The job's log directory for NCCL's per-rank files: next to the job's output, on the submit file system.
NCCL_LOG_DIR = "${SLURM_SUBMIT_DIR:-$PWD}/${SLURM_JOB_NAME:-job}-${SLURM_JOB_ID}-nccl"


@dataclass(frozen=True)
class DebugSettings:
    """`job.debug` as the sbatch applies it (grpo_infra/debug.py holds the rule)."""

    exports: list[tuple[str, str]]
    """Double-quoted: the log directory expands in the batch shell."""
    ray_start_args: list[str]
    debugpy_check: str | None
    warning: str | None


def debug_settings(env: Environment) -> DebugSettings:
    return DebugSettings(
        exports=[(name, f'"{value}"') for name, value in debug.debug_env(env, NCCL_LOG_DIR)],
        ray_start_args=debug.ray_start_args(env),
        debugpy_check=debug.DEBUGPY_CHECK if debug.needs_debugpy(env) else None,
        warning=debug.warning(env),
    )
