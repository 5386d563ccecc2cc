"""Checkpoint retention: verl keeps `checkpoint.keep` checkpoints, and they fit a declared volume."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra import verl
from grpo_infra.check import violations
from grpo_infra.check.verl_rules import checkpoint_gib, model_params_billion
from grpo_infra.spec import Environment, load_stack
from tests.check.test_check import ROOT

STACKS = ["eks-prod", "gke-dev", "onprem-k8s", "local-k8s", "onprem-slurm", "local-slurm"]


def variant(stack: str, edit) -> Environment:
    data = load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True, mode="json")
    edit(data)
    return Environment.model_validate(data)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_keeps_a_bounded_number_of_checkpoints(stack: str) -> None:
    words = verl.command(load_stack(stack, ROOT).environment)
    assert "trainer.max_actor_ckpt_to_keep=3" in words
    assert "trainer.max_critic_ckpt_to_keep=3" in words


def test_keep_null_renders_verls_default_of_every_checkpoint() -> None:
    def keep_all(data: dict[str, Any]) -> None:
        data["job"]["checkpoint"]["keep"] = None

    data = load_stack("gke-dev", ROOT).environment.model_dump(by_alias=True, mode="json")
    keep_all(data)
    words = verl.command(Environment.model_validate(data))
    assert not any(w.startswith("trainer.max_actor_ckpt_to_keep") for w in words)


def test_the_estimate_reads_the_model_size_from_its_name() -> None:
    env = load_stack("eks-prod", ROOT).environment  # Qwen2.5-7B-Instruct
    assert model_params_billion(env) == 7
    assert round(checkpoint_gib(env)) == round(7e9 * 12 / 2**30)  # 78 GiB


def test_a_retention_larger_than_the_volume_is_refused() -> None:
    # 3 checkpoints of Qwen2.5-7B (78.2 GiB each) = 235 GiB > 200 GiB.
    env = variant("eks-prod", lambda d: d["job"]["checkpoint"]["volume"].update(sizeGib=200))
    found = [v for v in violations(env) if v.rule == "checkpoint-retention"]
    assert len(found) == 1 and found[0].where.endswith("job.checkpoint.keep")
    assert "need 235 GiB" in found[0].message and found[0].by == "35 GiB"
    roomy = variant("eks-prod", lambda d: d["job"]["checkpoint"]["volume"].update(sizeGib=300))
    assert [v for v in violations(roomy) if v.rule == "checkpoint-retention"] == []


def test_keep_one_still_needs_room_for_two_during_a_save() -> None:
    def one(d: dict[str, Any]) -> None:
        d["job"]["checkpoint"]["keep"] = 1
        d["job"]["checkpoint"]["volume"]["sizeGib"] = 100

    found = [v for v in violations(variant("eks-prod", one)) if v.rule == "checkpoint-retention"]
    assert found and "2 checkpoints" in found[0].message


def test_keeping_every_checkpoint_on_a_sized_volume_is_refused() -> None:
    data = load_stack("eks-prod", ROOT).environment.model_dump(by_alias=True, mode="json")
    data["job"]["checkpoint"]["keep"] = None
    data["job"]["checkpoint"]["volume"]["sizeGib"] = 10000
    found = [v for v in violations(Environment.model_validate(data)) if v.rule == "checkpoint-retention"]
    assert found and "keeps every checkpoint" in found[0].message


def test_an_unreadable_model_size_asks_for_it() -> None:
    def hub(d: dict[str, Any]) -> None:
        d["job"]["modelPath"] = "/models/my-model"
        d["job"]["checkpoint"]["volume"]["sizeGib"] = 100

    found = [v for v in violations(variant("eks-prod", hub)) if v.rule == "checkpoint-retention"]
    assert found and found[0].where.endswith("checkpoint.modelParamsBillion")
