"""The verl GRPO command line, derived from the spec.

One function builds the Hydra overrides for both targets, so that the RayJob's entrypoint and
the sbatch script launch the same training. The gang's shape (`trainer.nnodes`,
`trainer.n_gpus_per_node`) comes from the pool, never from a hand-typed number; the rollout engine
(`rollout.name`) from the image's declared contents (grpo_infra/image), and `check` judges every key
against the trainer config of the verl release the image declares.
"""

from __future__ import annotations

import re
import shlex

from .image import rollout_engine
from .spec import Environment
from .spec.image import VERL_DEFAULT_ATTENTION
from .spec.job import OverrideValue
from .watchdog import watchdog_overrides

ENTRYPOINT = ("python3", "-m", "verl.trainer.main_ppo")
# verl 0.9.1's fully asynchronous trainer: trainer and rollout on GPUs of their own (job.layout
# `disaggregated`); its Hydra config is fully_async_policy/config/fully_async_ppo_trainer.yaml, which
# extends ppo_trainer (lines 5-7) with `rollout.*` and `async_training.*` (lines 9-64).
FULLY_ASYNC_MODULE = "verl.experimental.fully_async_policy.fully_async_main"
NNODES = "trainer.nnodes"
N_GPUS_PER_NODE = "trainer.n_gpus_per_node"
ROLLOUT_NNODES = "rollout.nnodes"
ROLLOUT_N_GPUS_PER_NODE = "rollout.n_gpus_per_node"

_BARE = re.compile(r"^[A-Za-z0-9_./-]+$")
_LOOKS_TYPED = re.compile(r"^(true|false|null|none|nan|inf|[-+]?\d[\d_]*(\.\d*)?([eE][-+]?\d+)?)$", re.IGNORECASE)


def overrides(env: Environment) -> list[tuple[str, OverrideValue]]:
    """Every `key=value` verl receives, in a stable order: derived first, then the spec's extras."""
    job, gang = env.job, env.gang
    secrets = {s.env for s in job.secrets}
    loggers = ["console", "wandb"] if "WANDB_API_KEY" in secrets else ["console"]
    pairs: list[tuple[str, OverrideValue]] = [
        ("algorithm.adv_estimator", "grpo"),
        ("algorithm.use_kl_in_reward", False),
        ("data.train_files", list(job.data.train_files)),
        ("data.val_files", list(job.data.val_files)),
        # Disaggregated: 0, as the fully asynchronous rollouter requires (`layout_overrides`).
        ("data.train_batch_size", 0 if env.disaggregated else job.batch.train),
        ("data.max_prompt_length", job.data.max_prompt_length),
        ("data.max_response_length", job.data.max_response_length),
        ("actor_rollout_ref.model.path", job.model_path),
        ("actor_rollout_ref.actor.optim.lr", job.learning_rate),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", job.batch.mini),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", job.batch.micro_per_gpu),
        ("actor_rollout_ref.actor.use_kl_loss", job.kl.use_kl_loss),
        ("actor_rollout_ref.actor.kl_loss_coef", job.kl.coef),
        ("actor_rollout_ref.actor.kl_loss_type", job.kl.type),
        ("actor_rollout_ref.rollout.name", rollout_engine(env)),
        ("actor_rollout_ref.rollout.n", job.rollout.group_size),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", job.rollout.tensor_parallel),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", job.rollout.gpu_memory_utilization),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", job.batch.log_prob_micro_per_gpu),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", job.batch.log_prob_micro_per_gpu),
        ("trainer.logger", loggers),
        ("trainer.project_name", job.project),
        ("trainer.experiment_name", job.experiment),
        ("trainer.total_epochs", job.total_epochs),
        (NNODES, gang.nodes),
        (N_GPUS_PER_NODE, gang.gpus_per_node),
        ("trainer.default_local_dir", job.checkpoint.dir),
        ("trainer.save_freq", job.checkpoint.save_freq),
        ("trainer.resume_mode", job.checkpoint.resume),
        *retention_overrides(env),
        *watchdog_overrides(env),
    ]
    pairs += layout_overrides(env)
    pairs += attention_override(env)
    pairs += sorted(job.overrides.items())
    return pairs


def entrypoint(env: Environment) -> tuple[str, ...]:
    """verl's module for the job's layout: the hybrid-engine trainer, or the fully asynchronous one."""
    return ("python3", "-m", FULLY_ASYNC_MODULE) if env.disaggregated else ENTRYPOINT


def layout_overrides(env: Environment) -> list[tuple[str, OverrideValue]]:
    """What a disaggregated layout tells verl 0.9.1's fully asynchronous trainer (none when colocated).

    - `actor_rollout_ref.hybrid_engine` false: the trainer and the rollouter both assert it
      (fully_async_trainer.py:75-76, fully_async_rollouter.py:348-350); ppo_trainer's default is true and
      fully_async_ppo_trainer.yaml leaves it so.
    - `rollout.nnodes` / `rollout.n_gpus_per_node`: the rollout role's nodes and its pool's GPUs per node;
      fully_async_main.py:235-236 copies them into `actor_rollout_ref.rollout`, and the rollout replicas
      take their GPUs from them (fully_async_trainer.py:171, workers/rollout/replica.py:189-208).
    - `data.train_batch_size` 0: the rollouter refuses any other value (fully_async_rollouter.py:351); the
      trainer instead takes `async_training.require_batches` mini batches per step (fully_async_ppo_trainer.yaml
      lines 18-19), which is `batch.train / batch.mini`, so a step still trains on `batch.train` prompts.
    - `rollout.total_rollout_steps` null: its default 100 (fully_async_ppo_trainer.yaml line 64) would cap the
      run at 100 rollout steps whatever `totalEpochs` says (fully_async_rollouter.py:405-407).
    - a reward model role: verl's standalone reward model on its own GPUs (`reward.reward_model.enable`,
      `enable_resource_pool`, `nnodes`, `n_gpus_per_node`; experimental/reward_loop/reward_model.py:53-94,
      fully_async_rollouter.py:362-363 requires the resource pool).
    """
    roles = {r.role: r for r in env.role_gangs()}
    if not roles:
        return []
    batch = env.job.batch
    rollout = roles["rollout"]
    pairs: list[tuple[str, OverrideValue]] = [
        ("actor_rollout_ref.hybrid_engine", False),
        (ROLLOUT_NNODES, rollout.nodes),
        (ROLLOUT_N_GPUS_PER_NODE, rollout.gpus_per_node),
        ("rollout.total_rollout_steps", None),
        ("async_training.require_batches", max(1, batch.train // batch.mini)),
    ]
    reward = roles.get("rewardModel")
    if reward is not None:
        pairs += [
            ("reward.reward_model.enable", True),
            ("reward.reward_model.enable_resource_pool", True),
            ("reward.reward_model.nnodes", reward.nodes),
            ("reward.reward_model.n_gpus_per_node", reward.gpus_per_node),
        ]
    return pairs


def retention_overrides(env: Environment) -> list[tuple[str, OverrideValue]]:
    """How many checkpoints verl keeps: `checkpoint.keep` for the actor and the critic (verl 0.9.1
    trainer/config/ppo_trainer.yaml `max_actor_ckpt_to_keep` / `max_critic_ckpt_to_keep`, default null = all;
    ray_trainer.py `_save_checkpoint` deletes the oldest beyond it); none when every one is kept."""
    keep = env.job.checkpoint.keep
    if keep is None:
        return []
    return [("trainer.max_actor_ckpt_to_keep", keep), ("trainer.max_critic_ckpt_to_keep", keep)]


# verl 0.9.1 reads the attention implementation from the model's override_config, default
# flash_attention_2 (verl/workers/config/model.py: `self.override_config.get("attn_implementation",
# "flash_attention_2")`); its trainer config has `actor_rollout_ref.model.override_config: {}`, so the
# key is added with Hydra's `+` (a plain override of a key the struct lacks is refused).
ATTENTION_KEY = "+actor_rollout_ref.model.override_config.attn_implementation"


def attention_override(env: Environment) -> list[tuple[str, OverrideValue]]:
    """The attention implementation, passed only when it is not verl's default."""
    attention = env.image.contents.attention
    return [] if attention == VERL_DEFAULT_ATTENTION else [(ATTENTION_KEY, attention)]


def hydra_value(value: OverrideValue) -> str:
    """A value in Hydra's override grammar: quoted where a bare word would change its type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if _BARE.match(value) and not _LOOKS_TYPED.match(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def override_args(pairs: list[tuple[str, OverrideValue]]) -> list[str]:
    """`key=value` arguments, one per override."""
    return [f"{key}={hydra_value(value)}" for key, value in pairs]


def command(env: Environment) -> list[str]:
    """The full verl GRPO argv."""
    return [*entrypoint(env), *override_args(overrides(env))]


def shell_command(env: Environment) -> str:
    """The verl GRPO command as one shell-quoted line (a RayJob entrypoint)."""
    return shlex.join(command(env))
