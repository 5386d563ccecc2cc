"""verl's own batch and parallelism constraints, checked before any GPU is allocated.

Each rule cites where verl 0.9.1 enforces it at run time — after the gang has been admitted, models
loaded and minutes or hours spent. Checking them here turns that crash into a refusal at review time.
"""

from __future__ import annotations

import re

from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

JOB = f"{ENVIRONMENT_KEY}.job"
# verl 0.9.1's FSDP checkpoint (verl/utils/checkpoint/fsdp_checkpoint_manager.py, save contents by default
# model, optimizer, extra): each rank's fp32 parameter shard (4 B per parameter) and Adam's two fp32 moments
# (8 B): 12 bytes per parameter of the actor, over all ranks.
CHECKPOINT_BYTES_PER_PARAM = 12
_PARAMS_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def verl_violations(env: Environment) -> list[Violation]:
    """Every verl constraint the spec's batch sizes, group size and gang break."""
    job, gang = env.job, env.gang
    batch, n = job.batch, job.rollout.group_size
    world = gang.world_size
    out: list[Violation] = []

    # verl/workers/config/actor.py, ActorConfig.validate: train_batch_size >= ppo_mini_batch_size.
    if batch.train < batch.mini:
        out.append(
            Violation(
                "verl-train-vs-mini",
                f"{JOB}.batch.mini",
                f"mini batch {batch.mini} is larger than the train batch {batch.train}",
                f"{batch.mini - batch.train} prompts",
            )
        )
    # verl/utils/tensordict_utils.py, make_iterator: each rank's batch splits into whole mini batches.
    elif batch.train % batch.mini:
        out.append(
            Violation(
                "verl-train-mini-divisible",
                f"{JOB}.batch.train",
                f"train batch {batch.train} is not a multiple of the mini batch {batch.mini}",
                f"remainder {batch.train % batch.mini}",
            )
        )
    # verl/utils/config.py, validate_config: train_batch_size × rollout.n divisible by the GPU count
    # (FSDP: the minimal batch is one sample per GPU).
    samples = batch.train * n
    if samples % world:
        out.append(
            Violation(
                "verl-samples-per-gpu",
                f"{JOB}.batch.train",
                f"train batch × group size = {batch.train} × {n} = {samples} samples do not divide over {world} GPUs",
                f"remainder {samples % world}",
            )
        )
    # verl/workers/engine_workers.py, train_mini_batch: mini batch × rollout.n divisible by the data-parallel
    # size, which is every GPU of the gang under FSDP.
    mini_samples = batch.mini * n
    if mini_samples % world:
        out.append(
            Violation(
                "verl-mini-per-gpu",
                f"{JOB}.batch.mini",
                f"mini batch × group size = {batch.mini} × {n} = {mini_samples} samples do not divide over {world} GPUs",
                f"remainder {mini_samples % world}",
            )
        )
    # Same place: each GPU's share of a mini batch is cut into micro batches of ppo_micro_batch_size_per_gpu;
    # a micro batch larger than that share never fills.
    elif batch.micro_per_gpu > mini_samples // world:
        out.append(
            Violation(
                "verl-micro-vs-mini",
                f"{JOB}.batch.microPerGpu",
                f"micro batch {batch.micro_per_gpu} per GPU exceeds the {mini_samples // world} samples "
                "each GPU gets per mini batch",
                f"{batch.micro_per_gpu - mini_samples // world} samples",
            )
        )
    # verl/workers/rollout/vllm_rollout/vllm_async_server.py: gpus_per_node divisible by the rollout
    # tensor-parallel size (a TP group never spans nodes).
    # A disaggregated job's rollout runs on its own pool: verl/workers/rollout/replica.py:113-116 refuses a
    # replica whose GPUs do not divide over that pool's nodes.
    tp = job.rollout.tensor_parallel
    roles = {r.role: r for r in env.role_gangs()}
    rollout_gpus = roles["rollout"].gpus_per_node if roles else gang.gpus_per_node
    where = f" (pool {roles['rollout'].pool.name}, the rollout's)" if roles else ""
    if rollout_gpus % tp:
        out.append(
            Violation(
                "verl-rollout-tp",
                f"{JOB}.rollout.tensorParallel",
                f"tensor-parallel size {tp} does not divide the {rollout_gpus} GPUs of a node{where}",
                f"remainder {rollout_gpus % tp}",
            )
        )
    return out + retention_violations(env)


def model_params_billion(env: Environment) -> float | None:
    """The model's size in billions of parameters: stated, or read from the model's name (`Qwen2.5-7B-Instruct`)."""
    checkpoint = env.job.checkpoint
    if checkpoint.model_params_billion is not None:
        return checkpoint.model_params_billion
    found = _PARAMS_IN_NAME.findall(env.job.model_path.rsplit("/", 1)[-1])
    return max(float(n) for n in found) if found else None  # MoE names: total, then active (30B-A3B)


def checkpoint_gib(env: Environment) -> float | None:
    """One checkpoint's size on disk, GiB (`CHECKPOINT_BYTES_PER_PARAM`); None when the model's size is unknown."""
    params = model_params_billion(env)
    return None if params is None else params * 1e9 * CHECKPOINT_BYTES_PER_PARAM / 2**30


def retention_violations(env: Environment) -> list[Violation]:
    """The checkpoints verl keeps fit the checkpoint volume, when its size is declared.

    verl deletes the oldest checkpoints beyond `max_actor_ckpt_to_keep` before each save, but keeps at least the
    previous one until the new save completes (verl/utils/checkpoint/checkpoint_manager.py,
    ensure_checkpoint_capacity / register_checkpoint): at most max(keep, 2) checkpoints are on disk. A full
    volume fails the save hours into the run."""
    checkpoint = env.job.checkpoint
    volume = checkpoint.volume
    if volume is None or volume.size_gib is None:
        return []
    where = f"{JOB}.checkpoint.keep"
    if checkpoint.keep is None:
        return [
            Violation(
                "checkpoint-retention",
                where,
                f"keep: null keeps every checkpoint, which outgrows the {volume.size_gib} GiB volume as the run goes on; "
                "set how many to keep",
            )
        ]
    one = checkpoint_gib(env)
    if one is None:
        return [
            Violation(
                "checkpoint-retention",
                f"{JOB}.checkpoint.modelParamsBillion",
                f"the size of {env.job.model_path} cannot be read from its name: state modelParamsBillion so the "
                f"{volume.size_gib} GiB checkpoint volume can be checked",
            )
        ]
    on_disk = max(checkpoint.keep, 2)
    need = on_disk * one
    if need <= volume.size_gib:
        return []
    return [
        Violation(
            "checkpoint-retention",
            where,
            f"{on_disk} checkpoints of {one:.0f} GiB ({model_params_billion(env):g}B parameters × "
            f"{CHECKPOINT_BYTES_PER_PARAM} B) need {need:.0f} GiB; the checkpoint volume holds {volume.size_gib} GiB",
            f"{need - volume.size_gib:.0f} GiB",
        )
    ]
