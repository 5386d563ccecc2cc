"""The verl GRPO run: what to train, on what data, with which batch and rollout settings."""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import Field, PlainValidator, StringConstraints, ValidationInfo, field_validator, model_validator

from ..preflight.defaults import (
    DEFAULT_BACKEND,
    DEFAULT_FRACTION,
    DEFAULT_ITERATIONS,
    DEFAULT_TIMEOUT_S,
)
from .base import DnsLabel, EnvName, PositiveInt, SpecModel
from .debug import DEBUG_ENV_KEYS, Debug
from .layout import Colocated, Disaggregated, Layout
from .strings import MAX_PATH, AbsolutePath, DisplayName, Location, Value, visible

# Overrides the spec derives from the allocation; typing them again would let them drift.
# Every override grpo_infra.verl derives from the spec or the allocation. An override of one of these
# would win over the spec's value (Hydra keeps the last), so `check` would judge numbers verl never
# sees; tests/verl keeps this list equal to what grpo_infra.verl writes.
DERIVED_OVERRIDES = frozenset(
    {
        "algorithm.adv_estimator",
        "algorithm.use_kl_in_reward",
        "data.train_files",
        "data.val_files",
        "data.train_batch_size",
        "data.max_prompt_length",
        "data.max_response_length",
        "actor_rollout_ref.model.path",
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.kl_loss_type",
        "actor_rollout_ref.rollout.name",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "trainer.logger",
        "trainer.project_name",
        "trainer.experiment_name",
        "trainer.total_epochs",
        # from job.checkpoint.keep (grpo_infra/verl.py)
        "trainer.max_actor_ckpt_to_keep",
        "trainer.max_critic_ckpt_to_keep",
        # from image.contents.attention, when it is not verl's default (grpo_infra/verl.py)
        "actor_rollout_ref.model.override_config.attn_implementation",
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
        "trainer.default_local_dir",
        "trainer.save_freq",
        "trainer.resume_mode",
        # from job.collectiveTimeoutMinutes, and the worker setup hook that applies it (grpo_infra/watchdog.py)
        "actor_rollout_ref.nccl_timeout",
        "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook",
    }
)
# What a disaggregated layout derives besides (grpo_infra/verl.py `layout_overrides`): the rollout's shape
# and what the fully asynchronous trainer needs, and a reward model role's shape.
LAYOUT_OVERRIDES = frozenset(
    {
        "actor_rollout_ref.hybrid_engine",
        "rollout.nnodes",
        "rollout.n_gpus_per_node",
        "rollout.total_rollout_steps",
        "async_training.require_batches",
    }
)
REWARD_MODEL_OVERRIDES = frozenset(
    {
        "reward.reward_model.enable",
        "reward.reward_model.enable_resource_pool",
        "reward.reward_model.nnodes",
        "reward.reward_model.n_gpus_per_node",
    }
)
DERIVED_OVERRIDES = DERIVED_OVERRIDES | LAYOUT_OVERRIDES | REWARD_MODEL_OVERRIDES
# Environment variable names that hold credentials; they belong in `secrets`, not `env`.
_SECRET_LIKE = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)$")

OverrideKey = Annotated[str, StringConstraints(pattern=r"^\+{0,2}[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")]
OverrideValue = str | int | float | bool | None | list[str | int | float | bool]


def _override_item(value: object) -> str | int | float | bool:
    """One scalar of an override: a finite number, a boolean, or printable text on one line."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value
    if isinstance(value, str):
        if len(value) > MAX_PATH:
            raise ValueError(f"string should have at most {MAX_PATH} characters")
        return visible(value)
    raise ValueError("expected a string, a number, a boolean, null or a list of those")


def _override_value(value: object) -> OverrideValue:
    """An override's value, checked as one value: a union's per-member errors would name no single problem."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_override_item(item) for item in value]
    return _override_item(value)


Override = Annotated[OverrideValue, PlainValidator(_override_value, json_schema_input_type=OverrideValue)]


class Data(SpecModel):
    """verl's data settings."""

    train_files: list[Location] = Field(min_length=1)
    """Parquet files verl trains on (`data.train_files`)."""
    val_files: list[Location] = Field(min_length=1)
    """Parquet files verl validates on (`data.val_files`)."""
    max_prompt_length: PositiveInt
    """`data.max_prompt_length`, tokens."""
    max_response_length: PositiveInt
    """`data.max_response_length`, tokens."""


class Batch(SpecModel):
    """Batch sizes in prompts (train, mini) and samples per GPU (micro)."""

    train: PositiveInt = Field(description="data.train_batch_size: prompts per step.")
    mini: PositiveInt = Field(description="actor.ppo_mini_batch_size: prompts per optimizer update.")
    micro_per_gpu: PositiveInt = Field(description="actor.ppo_micro_batch_size_per_gpu.")
    log_prob_micro_per_gpu: PositiveInt = Field(description="rollout/ref log_prob_micro_batch_size_per_gpu.")


class Rollout(SpecModel):
    """GRPO rollouts: engine, parallelism, group size."""

    engine: Literal["vllm", "sglang"] | None = Field(
        default=None, description="Rollout engine (`actor_rollout_ref.rollout.name`); the image's engine when omitted."
    )
    tensor_parallel: PositiveInt
    """Rollout tensor-parallel size; divides the GPUs of a node."""
    group_size: Annotated[int, Field(ge=2)] = Field(
        description="GRPO group size: responses sampled per prompt (actor_rollout_ref.rollout.n)."
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)]
    """Share of GPU memory the rollout engine may take."""


class Kl(SpecModel):
    """GRPO puts KL in the loss, against the reference model, not in the reward."""

    use_kl_loss: bool = True
    """`actor.use_kl_loss`."""
    coef: Annotated[float, Field(ge=0)]
    """`actor.kl_loss_coef`."""
    type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = "low_var_kl"
    """`actor.kl_loss_type`."""


class NfsExport(SpecModel):
    """An NFS export."""

    server: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")]
    """NFS server."""
    path: AbsolutePath
    """Exported path."""


class CheckpointVolume(SpecModel):
    """Where `checkpoint.dir` lives on Kubernetes: exactly one of a PVC, an NFS export or a host path."""

    claim_name: (
        Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)] | None
    ) = Field(default=None, description="A ReadWriteMany PersistentVolumeClaim in the tenant's namespace.")
    nfs: NfsExport | None = None
    host_path: AbsolutePath | None = Field(
        default=None, description="A directory on each node; shared only when `hostPathShared` says so."
    )
    host_path_shared: bool = Field(
        default=False,
        description="`hostPath` is one shared file system every node mounts at that path (Lustre, NFS, GPFS); "
        "without it a multi-node gang's checkpoints would be split over the nodes' own disks and `check` refuses.",
    )
    size_gib: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="The volume's size, GiB, when known: `check` refuses a retention (`checkpoint.keep`) whose "
        "checkpoints would not fit in it.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointVolume:
        given = [k for k in ("claim_name", "nfs", "host_path") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of `claimName`, `nfs` {server, path} or `hostPath`")
        if self.host_path_shared and self.host_path is None:
            raise ValueError("`hostPathShared` describes a `hostPath`; claims and NFS exports are shared already")
        return self

    def shared(self) -> bool:
        """Does every node see the same files here? Claims (ReadWriteMany) and NFS do; a host path only if declared."""
        return self.host_path is None or self.host_path_shared


# verl 0.9.1 writes checkpoints to `trainer.default_local_dir` and resumes only from there (a POSIX path):
# `trainer.default_hdfs_dir` copies to `hdfs://` only and, when set, resuming raises NotImplementedError
# (verl/trainer/ppo/ray_trainer.py `_load_checkpoint`; verl/utils/hdfs_io.py `_is_non_local`). A bucket
# must therefore reach the pods as a mounted file system (a CSI-backed claim).
_OBJECT_STORE = re.compile(r"^(s3|s3a|gs|gcs|az|abfss?|hdfs)://", re.IGNORECASE)


class Checkpoint(SpecModel):
    """Where checkpoints go and how a restarted run resumes."""

    dir: AbsolutePath = Field(description="Shared directory every node sees; resume reads from here after a requeue.")
    save_freq: PositiveInt = Field(description="Save every N training steps.")
    resume: Literal["auto", "disable"] = "auto"
    """`trainer.resume_mode`: `auto` resumes from the newest checkpoint in `dir` after a requeue or restart."""
    keep: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        default=3,
        description="Checkpoints kept (verl's trainer.max_actor_ckpt_to_keep / max_critic_ckpt_to_keep): older ones "
        "are deleted after each save; null keeps every one.",
    )
    model_params_billion: Annotated[float, Field(gt=0, le=10000)] | None = Field(
        default=None,
        description="The model's parameter count in billions, for the checkpoint size estimate; default: read from "
        "`modelPath` (`...-7B-...`).",
    )
    volume: CheckpointVolume | None = Field(
        default=None,
        description="Kubernetes only: the volume mounted at `dir` in every Ray pod; when omitted, the "
        "PersistentVolumeClaim `grpo-checkpoints` in the tenant's namespace.",
    )

    @field_validator("dir", mode="before")
    @classmethod
    def _posix_dir(cls, value: object) -> object:
        if isinstance(value, str) and _OBJECT_STORE.match(value):
            raise ValueError(
                f"{value}: verl 0.9.1 saves and resumes only from a POSIX path (trainer.default_local_dir); "
                "mount the bucket with a CSI driver and give its PersistentVolumeClaim as `volume.claimName`"
            )
        return value


class NcclGate(SpecModel):
    """The fabric gate run before training: a timed all-reduce over every GPU of the gang, judged
    against the pool's fabric (docs/nccl-preflight.md). On by default: a run on a fabric that fell
    back to TCP wastes days of GPU time."""

    enabled: bool = True
    """Run the fabric gate before training (off: start training without it)."""
    expected_busbw_gbps: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="All-reduce bus bandwidth (GB/s) a healthy gang reaches; the documented default "
        "for the pool's fabric and GPUs per node when omitted (none for fabric `none`).",
    )
    fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        default=DEFAULT_FRACTION, description="Fail under fraction x expected busbw."
    )
    backend: Literal["nccl", "gloo"] = Field(
        default=DEFAULT_BACKEND,
        description="nccl on GPUs; gloo on CPU tensors, one rank per node, for nodes without CUDA (the local sandbox).",
    )
    size_mib: Annotated[int, Field(ge=1, le=16384)] | None = Field(
        default=None,
        description="All-reduce message size, MiB; when omitted, the size calibrated for the pool's fabric "
        "(on its bandwidth plateau: 1024 for infiniband/roce, 8192 for efa; docs/nccl-preflight.md).",
    )
    iterations: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=DEFAULT_ITERATIONS, description="Timed all-reduces."
    )
    timeout_seconds: Annotated[int, Field(ge=10, le=3600)] = Field(
        default=DEFAULT_TIMEOUT_S, description="Bound on the whole gate, placement included: it never hangs the job."
    )
    all_reduce_perf: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./+-]+$")] = Field(
        default="all_reduce_perf",
        description="Slurm, backend nccl: the nccl-tests all_reduce_perf binary (MPI build), a path or a "
        "name on the job's PATH (in the image under pyxis/Apptainer).",
    )
    mpi: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$")] = Field(
        default="pmix",
        description="Slurm, backend nccl: srun's --mpi plugin that wires up all_reduce_perf's ranks "
        "(pmix, pmix_v4, pmi2; `srun --mpi=list`).",
    )


class Preflight(SpecModel):
    """Checks the job runs inside its allocation before training starts."""

    nccl: NcclGate = Field(default_factory=NcclGate)


class SecretRef(SpecModel):
    """An environment variable whose value is a Pulumi `secure:` config value of this stack."""

    env: EnvName
    """Environment variable the job sees."""
    config: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")] = Field(
        description="Key under the grpo-infra namespace, set with `pulumi config set --secret`."
    )


class Probe(SpecModel):
    """Run the probe (grpo_infra/probe.py) in verl's place, for clusters whose GPUs are placeholders.

    verl needs CUDA; the local cluster's nodes have none. The probe proves what the stack is responsible
    for: Ray sees every node of the gang with its GPUs, one bundle per node (STRICT_SPREAD) runs a task
    every step, and numbered steps in verl's checkpoint layout land in `job.checkpoint.dir`, so a retried
    or requeued gang resumes after the last one (and the resume rule holds it to advancing)."""

    steps: PositiveInt = 3
    """Total steps of the run (verl's `total_training_steps` in the probe's terms)."""
    step_seconds: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """How long each step takes: long enough to lose a node mid-run in a drill."""


# What the Kubernetes stack runs the gang as (docs/kubernetes.md, "Which kind"): a RayJob that runs verl once
# and ends, a RayCluster that stays up for `grpo-infra submit`, or a RayCronJob that starts a RayJob on a
# schedule. Slurm runs the batch path only.
JobKind = Literal["rayjob", "raycluster", "raycronjob"]
# KubeRay v1.7.0 ray-operator/controllers/ray/utils/constant.go: a RayCluster's name ≤ 53 (its pods' names
# must stay DNS labels), a RayJob's ≤ 53 - 6 (its RayCluster is `<name>-<5 chars>`), a RayCronJob's ≤ 47 - 11
# (its RayJobs are `<name>-<minutes since the epoch>`); checked by utils/validation.go
# `ValidateRayClusterMetadata`, `ValidateRayJobMetadata`, `ValidateRayCronJobSpec`.
MAX_NAME = {"raycluster": 53, "rayjob": 47, "raycronjob": 36}
KIND_OBJECT = {"rayjob": "RayJob", "raycluster": "RayCluster", "raycronjob": "RayCronJob"}


class Job(SpecModel):
    """The verl GRPO run."""

    kind: JobKind = Field(
        default="rayjob",
        description="Kubernetes: `rayjob` (run verl once, then free the GPUs), `raycluster` (a gang-admitted Ray "
        "cluster with a bounded lifetime, jobs sent with `grpo-infra submit`) or `raycronjob` (a RayJob on "
        "`kubernetes.rayCronJob.schedule`). Slurm: `rayjob` only.",
    )
    name: Annotated[str, StringConstraints(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")]
    """Job name: the Ray object's name and sbatch --job-name (RayJob ≤ 47, RayCluster ≤ 53, RayCronJob ≤ 36)."""
    tenant: DnsLabel
    """The tenant whose queue and quota the job uses."""
    pool: DnsLabel | None = Field(
        default=None,
        description="The pool the gang runs on (layout `colocated`); a disaggregated job names a pool per role "
        "in `layout` instead.",
    )
    nodes: PositiveInt | None = Field(
        default=None, description="Gang size in nodes; the whole pool when omitted (layout `colocated` only)."
    )
    layout: Layout = Field(default_factory=Colocated)
    """Where GRPO's roles run: `colocated` (the default) or `disaggregated` (docs/spec.md, "Layout")."""
    model_path: Location
    """`actor_rollout_ref.model.path`."""
    data: Data
    batch: Batch
    rollout: Rollout
    kl: Kl
    learning_rate: Annotated[float, Field(gt=0, lt=1)]
    """`actor.optim.lr`."""
    total_epochs: PositiveInt
    """`trainer.total_epochs`."""
    project: DisplayName
    """`trainer.project_name`."""
    experiment: DisplayName
    """`trainer.experiment_name`."""
    checkpoint: Checkpoint
    overrides: dict[OverrideKey, Override] = Field(default_factory=dict)
    """Extra verl Hydra overrides; the derived keys (nnodes, GPUs per node, ...) are refused."""
    env: dict[EnvName, Value] = Field(default_factory=dict)
    """Plain environment variables of every process; credentials belong in `secrets`."""
    secrets: list[SecretRef] = Field(default_factory=list)
    """Environment variables taken from Pulumi secrets of this stack."""
    preflight: Preflight = Field(default_factory=Preflight)
    debug: Debug = Field(default_factory=Debug)
    probe: Probe | None = None
    collective_timeout_minutes: Annotated[int, Field(ge=1, le=120)] = Field(
        default=10,
        description="How long a rank may wait in one collective before torch's NCCL watchdog aborts it (the "
        "process-group timeout, and the watchdog's heartbeat). Default 10: verl's own `nccl_timeout` (600 s); "
        "without it verl 0.9.1's process group waits torch's 30 min. Raise it above the longest collective a "
        "healthy step has (a checkpoint written to slow storage while the other ranks wait).",
    )
    """The probe instead of verl (Kubernetes stacks whose GPUs are placeholders; docs/local-kubernetes.md)."""

    @field_validator("name")
    @classmethod
    def _name_fits_kind(cls, name: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind", "rayjob")
        limit = MAX_NAME[kind]
        if len(name) > limit:
            raise ValueError(
                f"string should have at most {limit} characters for a {KIND_OBJECT[kind]} "
                f"(KubeRay v1.7.0 refuses longer), got {len(name)}"
            )
        return name

    @field_validator("overrides")
    @classmethod
    def _not_derived(cls, overrides: dict[str, OverrideValue]) -> dict[str, OverrideValue]:
        clash = sorted(DERIVED_OVERRIDES & {k.lstrip("+") for k in overrides})
        if clash:
            raise ValueError(f"{', '.join(clash)} set by the spec; change the spec field instead of overriding it")
        return overrides

    @model_validator(mode="after")
    def _pools_named_once(self) -> Job:
        """The pool is named in one place: `pool` for a colocated job, `layout`'s roles for a disaggregated one."""
        if isinstance(self.layout, Disaggregated):
            given = [k for k in ("pool", "nodes") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"job.{given[0]}: a disaggregated job names each role's pool and nodes in job.layout "
                    "(trainer, rollout); remove it"
                )
        elif self.pool is None:
            raise ValueError("job.pool: field required (the pool the colocated gang runs on)")
        return self

    @field_validator("env")
    @classmethod
    def _no_plaintext_secrets(cls, env: dict[str, str]) -> dict[str, str]:
        leaked = sorted(k for k in env if _SECRET_LIKE.search(k))
        if leaked:
            raise ValueError(f"{', '.join(leaked)} looks like a credential; list it under `secrets` instead")
        owned = sorted(DEBUG_ENV_KEYS & set(env))
        if owned:
            raise ValueError(f"the debugger switch owns {', '.join(owned)}; set `job.debug` instead")
        return env

    @field_validator("secrets")
    @classmethod
    def _unique_secret_env(cls, secrets: list[SecretRef]) -> list[SecretRef]:
        names = [s.env for s in secrets]
        if len(names) != len(set(names)):
            raise ValueError("an environment variable is listed twice")
        return secrets
