"""`VLLM_*` variables in `job.env` that the image's vLLM does not define are warned of, with what replaces
them; the shipped stacks set vLLM's attention backend where vLLM 0.24 reads it, an engine argument verl
passes through."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from grpo_infra import verl
from grpo_infra.check import warnings
from grpo_infra.check.vllm_env import KNOWN, vllm_env_warnings
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT, SHIPPED_STACKS

RULE = "vllm-unknown-env"


def _with_env(stack: str, **variables: str) -> Environment:
    raw: dict[str, Any] = load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True)
    raw["job"]["env"] = dict(variables)
    return Environment.model_validate(raw)


def test_a_variable_vllm_0_24_does_not_define_is_warned_of_with_the_engine_argument_instead() -> None:
    env = _with_env("eks-prod", VLLM_ATTENTION_BACKEND="FLASH_ATTN")
    [found] = [w for w in warnings(env) if w.rule == RULE]
    assert found.where.endswith("environment.job.env.VLLM_ATTENTION_BACKEND")
    assert "Unknown vLLM environment variable" in found.message
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend" in found.message


def test_variables_vllm_defines_and_other_variables_pass() -> None:
    env = _with_env("eks-prod", VLLM_ENGINE_ITERATION_TIMEOUT_S="120", HF_HUB_OFFLINE="1")
    assert "VLLM_ENGINE_ITERATION_TIMEOUT_S" in KNOWN["0.24.0"]
    assert vllm_env_warnings(env) == []


def test_a_release_without_a_stored_list_is_not_judged() -> None:
    raw = _with_env("eks-prod", VLLM_ATTENTION_BACKEND="FLASH_ATTN").model_dump(by_alias=True, exclude_none=True)
    raw["image"]["contents"]["engine"]["version"] = "0.0.1"
    assert vllm_env_warnings(Environment.model_validate(raw)) == []


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_set_no_variable_vllm_ignores(stack: str) -> None:
    assert [w.line() for w in warnings(load_stack(stack, ROOT).environment) if w.rule == RULE] == []


def _verl_config(overrides: list[str]) -> Any:
    """verl's trainer config as `main_ppo` composes it with these Hydra overrides."""
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl is not installed"
    config_dir = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def test_eks_prods_attention_backend_reaches_the_engine_arguments_verl_hands_vllm() -> None:
    """verl 0.9.1 passes `actor_rollout_ref.rollout.engine_kwargs.vllm` to `vllm serve` as options
    (vllm_async_server.py, `build_cli_args_from_config`): FLASH_ATTN becomes `--attention-backend FLASH_ATTN`."""
    env = load_stack("eks-prod", ROOT).environment
    config = _verl_config(verl.override_args(verl.overrides(env)))
    assert dict(config.actor_rollout_ref.rollout.engine_kwargs.vllm) == {"attention_backend": "FLASH_ATTN"}
    assert not any(name.startswith("VLLM_") for name in env.job.env)
