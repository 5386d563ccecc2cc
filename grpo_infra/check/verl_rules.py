"""verl's own batch and parallelism constraints, checked before any GPU is allocated.

Each rule cites where verl 0.9.1 enforces it at run time — after the gang has been admitted, models
loaded and minutes or hours spent. Checking them here turns that crash into a refusal at review time.
"""

from __future__ import annotations

from ..spec import ENVIRONMENT_KEY, Environment
from .violation import Violation

JOB = f"{ENVIRONMENT_KEY}.job"


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
    tp = job.rollout.tensor_parallel
    if gang.gpus_per_node % tp:
        out.append(
            Violation(
                "verl-rollout-tp",
                f"{JOB}.rollout.tensorParallel",
                f"tensor-parallel size {tp} does not divide the {gang.gpus_per_node} GPUs of a node",
                f"remainder {gang.gpus_per_node % tp}",
            )
        )
    return out
