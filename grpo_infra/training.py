"""The job's training program: verl's GRPO command, or the probe in its place (`job.probe`).

One place decides what the driver runs, so the RayJob, a RayCronJob's runs and `grpo-infra submit`
run the same program under the same guards (grpo_infra/k8s/rayjob.py `entrypoint`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

from . import verl
from .spec import Environment

# Run as a module of the image's grpo-infra; it imports nothing else of the project (grpo_infra/probe.py).
PROBE_MODULE = "grpo_infra.probe"


def probe_roles(env: Environment) -> list[str]:
    """A disaggregated job's roles as the probe takes them (`--role=NAME=NODESxGPUS@POOL`, trainer first);
    none for a colocated job."""
    return [f"--role={r.role}={r.nodes}x{r.gpus_per_node}@{r.pool.name}" for r in env.role_gangs()]


def probe_command(env: Environment) -> list[str]:
    """The probe against the job's Ray cluster: every node of the gang with its GPUs (of each role, with its
    pool, for a disaggregated job), the head apart (a KubeRay head is a CPU pod outside the gang), the steps
    in the job's checkpoint directory."""
    probe = env.job.probe
    assert probe is not None
    gang = env.gang
    # A disaggregated job: every role's nodes, GPUs and pool, placed as verl places them.
    shape = probe_roles(env) or [
        "--nodes",
        str(gang.nodes),
        "--gpus-per-node",
        str(gang.gpus_per_node),
    ]
    return [
        "python3",
        "-m",
        PROBE_MODULE,
        "--address",
        "auto",
        *shape,
        "--head-apart",
        "--checkpoint-dir",
        env.job.checkpoint.dir,
        "--steps",
        str(probe.steps),
        "--step-seconds",
        f"{probe.step_seconds:g}",
    ]


def shell_command(env: Environment) -> str:
    """The driver's command as one shell-quoted line: the probe when the stack asks for it, else verl."""
    return shlex.join(probe_command(env)) if env.job.probe is not None else verl.shell_command(env)


# verl overrides that say how a run is kept, logged, sized or paced, not what it learns: a resume may change
# them (more epochs, another logger, a smaller micro batch) and still continue the same experiment. The gang's
# shape is judged by its own rule (grpo_infra/k8s/rayjob.py `world_size_guard`, verl#2265).
NOT_IDENTITY = frozenset(
    {
        "trainer.default_local_dir",
        "trainer.save_freq",
        "trainer.resume_mode",
        "trainer.max_actor_ckpt_to_keep",
        "trainer.max_critic_ckpt_to_keep",
        "trainer.total_epochs",
        "trainer.logger",
        verl.NNODES,
        verl.N_GPUS_PER_NODE,
        verl.ROLLOUT_NNODES,
        verl.ROLLOUT_N_GPUS_PER_NODE,
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.model.enable_gradient_checkpointing",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    }
)
# Characters of the sha256 kept as the experiment's name.
DIGEST_CHARS = 16


def identity_fields(env: Environment) -> dict[str, Any]:
    """What makes the experiment: the program (verl's trainer for the layout, or the probe) and every verl
    override that changes what is learned — model, data, algorithm, batch, the layout's — by its key."""
    if env.job.probe is not None:
        # The probe trains nothing: its steps are its own, never a verl run's to resume.
        return {"program": PROBE_MODULE}
    fields: dict[str, Any] = {"program": " ".join(verl.entrypoint(env))}
    fields.update((key, value) for key, value in verl.overrides(env) if key not in NOT_IDENTITY)
    return fields


def last_step(env: Environment) -> int | None:
    """The experiment's last training step when the stack fixes it: the probe's `steps`, or verl's
    `trainer.total_training_steps` override; None when verl derives it from the data (epochs × batches)."""
    if env.job.probe is not None:
        return env.job.probe.steps
    value = env.job.overrides.get("trainer.total_training_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def experiment_identity(env: Environment) -> dict[str, Any]:
    """The identity the resume rule records beside the checkpoints and compares at every start
    (grpo_infra/lifecycle/resume.py): a digest of `identity_fields`, the fields themselves (so a refusal can
    name what differs), the job's name (said in the refusal) and the last step, when the stack fixes it (a
    run resuming there has nothing left to train; not in the digest: more steps continue the experiment)."""
    fields = identity_fields(env)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:DIGEST_CHARS]
    return {"digest": digest, "job": env.job.name, "fields": fields, "last_step": last_step(env)}


def identity_json(env: Environment) -> str:
    """`experiment_identity` as one line of JSON with sorted keys (stable output for goldens)."""
    return json.dumps(experiment_identity(env), sort_keys=True, separators=(",", ":"))
