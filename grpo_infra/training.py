"""The job's training program: verl's GRPO command, or the probe in its place (`job.probe`).

One place decides what the driver runs, so the RayJob, a RayCronJob's runs and `grpo-infra submit`
run the same program under the same guards (grpo_infra/k8s/rayjob.py `entrypoint`).
"""

from __future__ import annotations

import shlex

from . import verl
from .spec import Environment

# Run as a module of the image's grpo-infra; it imports nothing else of the project (grpo_infra/probe.py).
PROBE_MODULE = "grpo_infra.probe"


def probe_command(env: Environment) -> list[str]:
    """The probe against the job's Ray cluster: every node of the gang with its GPUs (of each role, with its
    pool, for a disaggregated job), the head apart (a KubeRay head is a CPU pod outside the gang), the steps
    in the job's checkpoint directory."""
    probe = env.job.probe
    assert probe is not None
    gang = env.gang
    roles = env.role_gangs()
    # A disaggregated job: every role's nodes, GPUs and pool, placed as verl places them.
    shape = [f"--role={r.role}={r.nodes}x{r.gpus_per_node}@{r.pool.name}" for r in roles] or [
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
