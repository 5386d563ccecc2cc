"""The SGLang images run sglang 0.5.12 on transformers 5.9.0 against its own `==5.6.0`: `check` says so,
in one line naming the engine field, and a stack may waive it."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra.check import cautions, warnings
from grpo_infra.check.engine_pins import engine_pin_warnings
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT

RULE = "image-engine-transformers"


@pytest.mark.parametrize("name", ["local-k8s", "onprem-k8s"])
def test_the_sglang_stacks_are_warned_of_sglangs_transformers_pin(name: str) -> None:
    [found] = [w for w in warnings(load_stack(name, ROOT).environment) if w.rule == RULE]
    assert found.where.endswith("environment.image.contents.engine")
    assert "sglang 0.5.12 requires transformers==5.6.0" in found.message
    assert "installs transformers 5.9.0 (the lock's override" in found.message
    assert "\n" not in found.line()


@pytest.mark.parametrize("name", ["eks-prod", "gke-dev", "onprem-slurm", "local-slurm"])
def test_stacks_without_a_judged_engine_pin_pass(name: str) -> None:
    assert engine_pin_warnings(load_stack(name, ROOT).environment) == []


def test_a_lock_within_the_engines_requirement_passes() -> None:
    env = load_stack("local-k8s", ROOT).environment
    assert env.image.build is not None and env.image.build.lock is not None
    lock = env.image.build.lock.replace("\ntransformers==5.9.0 ", "\ntransformers==5.6.0 ")
    assert lock != env.image.build.lock
    raw: dict[str, Any] = env.model_dump(by_alias=True, exclude_none=True)
    raw["image"]["build"]["lock"] = lock
    assert engine_pin_warnings(Environment.model_validate(raw)) == []


def test_the_warning_can_be_waived_and_is_still_judged() -> None:
    env = load_stack("local-k8s", ROOT).environment
    raw: dict[str, Any] = env.model_dump(by_alias=True, exclude_none=True)
    raw["checks"] = {"waive": [{"rule": RULE, "reason": "verl 0.9.1 is tested on 5.9.0"}]}
    waived = Environment.model_validate(raw)
    assert RULE not in [w.rule for w in warnings(waived)]
    assert RULE in [w.rule for w in cautions(waived)]
