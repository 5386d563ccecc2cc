"""verl's command line for one stack per target, written out by hand from the stack file.

These expectations come from reading `stacks/Pulumi.eks-prod.yaml` and `stacks/Pulumi.onprem-slurm.yaml`
against verl's option names (verl 0.9.1, `verl/trainer/config/ppo_trainer.yaml`) and Hydra's override
grammar (lists as `[a,b]`, floats as Python prints them) — not from `grpo_infra.verl`, so a change in
the renderer that changes what verl receives fails here even when both targets change together.
"""

from __future__ import annotations

import subprocess

from grpo_infra.k8s import ray_job
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import load_stack
from tests.conftest import ROOT
from tests.k8s.entrypoints import verl_argv

MAIN = ["python3", "-m", "verl.trainer.main_ppo"]

# eks-prod: 4 × p5.48xlarge with 8 H100 each; batch {train: 1024, mini: 256, microPerGpu: 4,
# logProbMicroPerGpu: 8}; rollout {vllm, tensorParallel: 2, groupSize: 8, gpuMemoryUtilization: 0.6}.
EKS_PROD = {
    "algorithm.adv_estimator": "grpo",
    "data.train_files": "[/data/math/train.parquet]",
    "data.val_files": "[/data/math/test.parquet]",
    "data.train_batch_size": "1024",
    "data.max_prompt_length": "1024",
    "data.max_response_length": "2048",
    "actor_rollout_ref.model.path": "/models/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr": "1e-06",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "4",
    "actor_rollout_ref.actor.use_kl_loss": "true",
    "actor_rollout_ref.actor.kl_loss_coef": "0.001",
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.n": "8",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "0.6",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "true",
    "trainer.logger": "[console,wandb]",  # WANDB_API_KEY is among the job's secrets
    "trainer.project_name": "grpo-prod",
    "trainer.experiment_name": "qwen25-7b-math-32gpu",
    "trainer.total_epochs": "15",
    "trainer.nnodes": "4",
    "trainer.n_gpus_per_node": "8",
    "trainer.default_local_dir": "/checkpoints/qwen25-7b-math",
    "trainer.save_freq": "20",
    "trainer.resume_mode": "auto",
    "trainer.test_freq": "20",
    "trainer.val_before_train": "false",
}

# onprem-slurm: job.nodes 8 of a 16-node pool with 8 H100 each; batch {train: 512, mini: 64,
# microPerGpu: 1, logProbMicroPerGpu: 2}; rollout {vllm, tensorParallel: 4, groupSize: 16, 0.7}.
ONPREM_SLURM = {
    "algorithm.adv_estimator": "grpo",
    "data.train_files": "[/data/dapo-math/train.parquet]",
    "data.val_files": "[/data/aime-2024/test.parquet]",
    "data.train_batch_size": "512",
    "data.max_prompt_length": "2048",
    "data.max_response_length": "8192",
    "actor_rollout_ref.model.path": "/models/Qwen2.5-32B-Instruct",
    "actor_rollout_ref.actor.optim.lr": "1e-06",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "1",
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.n": "16",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "4",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "0.7",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "2",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "true",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "true",
    "trainer.logger": "[console,wandb]",
    "trainer.project_name": "grpo-onprem",
    "trainer.experiment_name": "qwen25-32b-dapo",
    "trainer.total_epochs": "10",
    "trainer.nnodes": "8",
    "trainer.n_gpus_per_node": "8",
    "trainer.default_local_dir": "/checkpoints/qwen25-32b-dapo",
    "trainer.save_freq": "10",
    "trainer.resume_mode": "auto",
}


def _pairs(argv: list[str]) -> dict[str, str]:
    assert argv[:3] == MAIN, argv[:3]
    pairs = [a.split("=", 1) for a in argv[3:]]
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"an option is given twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    return dict(pairs)


def _rayjob_argv(stack: str) -> list[str]:
    """verl's argv as the head's shell would run it from the RayJob's entrypoint (after the gate and the
    resume guards)."""
    return verl_argv(ray_job(load_stack(stack, ROOT).environment)["spec"]["entrypoint"])


def _sbatch_argv(stack: str, nodes: int, gpus: int) -> list[str]:
    """verl's argv as bash builds it in the sbatch script, for an allocation of `nodes` × `gpus`."""
    script = render_files(load_stack(stack, ROOT).environment)[SBATCH_PATH]
    lines = [line.strip() for line in script.splitlines()]  # the command is indented inside `main`
    block = "\n".join(lines[lines.index("# --- verl command ---") + 1 : lines.index("# --- end verl command ---")])
    program = f"SLURM_JOB_NUM_NODES={nodes}\ngpus_per_node={gpus}\n{block}\nprintf '%s\\0' \"${{verl_command[@]}}\"\n"
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def test_the_eks_prod_rayjob_runs_verl_with_the_stacks_values() -> None:
    given = _pairs(_rayjob_argv("eks-prod"))
    wrong = {k: (v, given.get(k)) for k, v in EKS_PROD.items() if given.get(k) != v}
    assert not wrong, f"expected vs given: {wrong}"


def test_the_onprem_slurm_sbatch_runs_verl_with_the_stacks_values() -> None:
    given = _pairs(_sbatch_argv("onprem-slurm", 8, 8))
    wrong = {k: (v, given.get(k)) for k, v in ONPREM_SLURM.items() if given.get(k) != v}
    assert not wrong, f"expected vs given: {wrong}"
