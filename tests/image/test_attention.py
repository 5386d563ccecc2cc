"""The attention implementation: verl's default renders nothing, any other is passed as the key verl 0.9.1 reads."""

from __future__ import annotations

from grpo_infra import verl
from grpo_infra.check import violations
from grpo_infra.image import guard_args

from .conftest import stack, variant

KEY = "+actor_rollout_ref.model.override_config.attn_implementation"


def test_verls_default_adds_no_override() -> None:
    assert not [k for k, _ in verl.overrides(stack("gke-dev")) if "attn_implementation" in k]


def test_sdpa_is_rendered_into_the_verl_command_and_passes_check() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].update(attention="sdpa"))
    assert f"{KEY}=sdpa" in verl.command(env)
    assert not [v for v in violations(env) if v.rule == "verl-override-key"]


def test_the_override_config_verl_reads_exists_in_its_trainer_config() -> None:
    # `+` adds attn_implementation under a dict verl's config has ({}), so Hydra accepts it.
    from grpo_infra.image.verl_releases import config_keys

    assert "actor_rollout_ref.model.override_config" in config_keys("0.9.1")


def test_the_guard_is_told_the_attention_implementation() -> None:
    args = guard_args(stack("gke-dev"))
    assert args[args.index("--attention") + 1] == "flash_attention_2"
