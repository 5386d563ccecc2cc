"""A Slurm stack's rehearsal changes only what the sandbox cannot be, each change said, and keeps what the
job asks of Slurm: its partition, account and QOS, its GRES per node, its port block, its retry budget."""

from __future__ import annotations

from grpo_infra import synth
from grpo_infra.rehearsal.slurm_plan import slurm_rehearsal as rehearsal
from grpo_infra.spec import load_stack
from tests.conftest import ROOT


def _directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_onprem_slurm_is_rehearsed_on_two_of_its_own_hosts_with_every_change_said() -> None:
    stack = load_stack("onprem-slurm", ROOT).environment
    planned = rehearsal("onprem-slurm", stack)
    lines = [s.line() for s in planned.substitutions]
    assert "pool h100-ib hosts: gpu[001-016] -> gpu[001-002] (sandbox nodes)" in lines
    assert "job.nodes (the gang): 8 -> 2" in lines
    assert "GPUs: NVML autodetection -> 8 placeholder device files" in lines
    assert "fabric gate: nccl (nccl-tests) -> gloo across nodes, CPU tensors" in lines
    assert any(line.startswith("image: registry.hpc.example.internal/grpo/verl") for line in lines)
    env = planned.env
    assert env.gang.pool.host_names == ["gpu001", "gpu002"] and env.gang.gpus_per_node == 8
    # What the job asks of Slurm stays the stack's own: partition, account, QOS, GRES per node, time limit.
    ours, theirs = (
        _directives(synth.render(env)["slurm/grpo.sbatch"]),
        _directives(synth.render(stack)["slurm/grpo.sbatch"]),
    )
    kept = [d for d in theirs if not d.startswith(("--nodes=", "--cpus-per-task="))]
    assert [d for d in ours if not d.startswith(("--nodes=", "--cpus-per-task="))] == kept
    assert "--nodes=2" in ours and "--gres=gpu:h100:8" in ours and "--qos=grpo-high" in ours
    assert env.slurm is not None and (env.slurm.ray_ports, env.slurm.retries) == (
        stack.slurm.ray_ports,
        stack.slurm.retries,
    )


def test_a_stack_already_shaped_like_the_sandbox_is_changed_only_where_it_must_be() -> None:
    """local-slurm is the sandbox's own stack: only the size rule, the probe and its checkpoint directory apply."""
    planned = rehearsal("local-slurm", load_stack("local-slurm", ROOT).environment)
    assert [s.line() for s in planned.substitutions] == [
        "pool sim hosts: node[1-3] -> node[1-2] (sandbox nodes)",
        "tenant sandbox gpuQuota: 24 -> 16",
        "entrypoint: verl (main_ppo) -> the probe, 3 checkpointed steps",
        "job.checkpoint.dir: /run/grpo-sandbox/shared/checkpoints -> "
        "/run/grpo-sandbox/shared/rehearsal-local-slurm/checkpoints",
    ]
