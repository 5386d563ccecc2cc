"""Slurm components: place the rendered files on the cluster."""

from __future__ import annotations

import pulumi

from grpo_infra.spec import Environment


def deploy_slurm(env: Environment) -> None:
    assert env.slurm is not None
    pulumi.export("partition", env.slurm.partition)
    pulumi.export("job", env.job.name)
