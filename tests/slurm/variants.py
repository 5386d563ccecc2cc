"""Shipped Slurm stacks, and variants of them made by editing the loaded spec as a user would the YAML."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT

SLURM_STACKS = ["local-slurm", "onprem-slurm"]
# local-slurm as a disaggregated job: the trainer's pool and the rollout's, both in the sandbox's partition.
STACK_DISAGGREGATED = "local-slurm-disagg"
TRAINER, ROLLOUT = "sim", "sim-rollout"


def stack(name: str) -> Environment:
    return load_stack(name, ROOT).environment


def variant(name: str, edit: Callable[[dict[str, Any]], None]) -> Environment:
    """The stack's environment with `edit` applied to its camelCase dict, validated again."""
    data = stack(name).model_dump(by_alias=True, exclude_none=True)
    edit(data)
    return Environment.model_validate(data)


def disaggregated_variant() -> Environment:
    """local-slurm with the trainer on node1 (8 GPUs) and the rollout on node[2-3] (4 GPUs each), edited as a user
    would edit the stack file."""
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local-slurm.yaml").read_text(encoding="utf-8"))
    environment = document["config"]["grpo-infra:environment"]
    trainer = environment["pools"][0]
    trainer["hosts"] = "node1"
    rollout = {**copy.deepcopy(trainer), "name": ROLLOUT, "hosts": "node[2-3]"}
    rollout["gpu"] = {**trainer["gpu"], "perNode": 4, "gresType": "simr"}
    environment["pools"].append(rollout)
    layouts = environment["slurm"]["nodeLayouts"]
    layouts.append({**copy.deepcopy(layouts[0]), "pool": ROLLOUT})
    job = environment["job"]
    del job["pool"]
    job["layout"] = {
        "kind": "disaggregated",
        "trainer": {"pool": TRAINER, "nodes": 1},
        "rollout": {"pool": ROLLOUT, "nodes": 2},
    }
    job["checkpoint"]["dir"] = "/run/grpo-sandbox/shared/disaggregated-checkpoints"
    environment["tenants"][0]["gpuQuota"] = 16
    del environment["launchers"]  # the launchers start one pool's gang (check rule layout-target)
    return Environment.model_validate(environment)
