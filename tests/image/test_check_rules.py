"""`check` refuses an image that cannot run the stack's job, before anything is applied.

The reviewer's five defects of the prebuilt verlai image, each on a stack that still has it, plus the
version rules (Ray for token auth and KubeRay's probes, verl's own config, verl's engine pairing).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from grpo_infra.check import violations
from grpo_infra.cli import app
from tests.conftest import ROOT

from .conftest import SHIPPED_STACKS, VERLAI_SGLANG, stack, variant, with_image


def rules(env: Any) -> dict[str, str]:
    """rule → the violation's line, for the image rules."""
    return {v.rule: v.line() for v in violations(env) if v.rule.startswith(("image-", "verl-override"))}


@pytest.mark.parametrize("name", SHIPPED_STACKS)
def test_shipped_stacks_declare_an_image_that_runs_their_job(name: str) -> None:
    assert rules(stack(name)) == {}


def test_verlai_image_on_eks_prod_is_refused_for_every_defect() -> None:
    # The stack as it was: rollout.name=vllm on the verlai SGLang image.
    env = with_image("eks-prod", VERLAI_SGLANG, engine="vllm")
    found = rules(env)
    # 1. no verl: `python3 -m verl.trainer.main_ppo` fails at once.
    assert "image has no verl" in found["image-verl-missing"]
    # 2. an SGLang image under rollout.name=vllm.
    assert "rollout.name is vllm but the image has sglang 0.5.2" in found["image-engine"]
    # 3. an EFA pool, an image without EFA userspace.
    assert "pool h100-efa talks EFA but the image has no EFA userspace" in found["image-efa"]
    # 4. Ray 2.47.1 with token auth on (KubeRay refuses token mode below 2.52.0).
    assert "rayAuth: token needs Ray >= 2.52.0, the image has Ray 2.47.1" in found["image-token-auth"]


def test_a_stated_ray_version_other_than_the_images_is_refused_with_the_probe_consequence() -> None:
    def edit(data: dict[str, Any]) -> None:
        data["image"] = copy.deepcopy(VERLAI_SGLANG)
        data["image"]["contents"].update(verl="0.9.1", engine={"name": "vllm", "version": "0.24.0"}, efa=True)
        data["kubernetes"]["rayJob"]["rayVersion"] = "2.60.0"

    line = rules(variant("eks-prod", edit))["image-ray-version"]
    assert "rayVersion 2.60.0 is not the image's Ray 2.47.1" in line
    assert "HTTP /api/healthz from 2.53.0" in line and "never become Ready" in line


def test_a_stated_ray_version_equal_to_the_images_passes() -> None:
    env = variant("gke-dev", lambda d: d["kubernetes"].setdefault("rayJob", {}).update(rayVersion="2.60.0"))
    assert rules(env) == {}


def test_verlai_image_under_slurms_nccl_gate_lacks_its_tools() -> None:
    env = with_image("onprem-slurm", VERLAI_SGLANG, engine="vllm")
    found = rules(env)
    # 5. the gate runs all_reduce_perf and grpo_infra inside the image: exit 127 / ModuleNotFoundError.
    assert "runs all_reduce_perf in the image, which has no nccl-tests" in found["image-gate-nccl-tests"]
    assert "lacks grpo-infra" in found["image-gate-grpo-infra"]
    assert {"image-verl-missing", "image-engine"} <= set(found)


def test_a_host_mounted_nccl_tests_build_is_the_supported_alternative() -> None:
    def edit(data: dict[str, Any]) -> None:
        data["image"]["contents"]["ncclTests"] = False
        data["slurm"]["container"]["mounts"].append("/shared/nccl-tests/build:/opt/nccl-tests")
        data["job"].setdefault("preflight", {}).setdefault("nccl", {})["allReducePerf"] = (
            "/opt/nccl-tests/all_reduce_perf"
        )

    # Without grpo-infra in the image its lock's inputs change too: that is the lock rule's business.
    assert {k: v for k, v in rules(variant("onprem-slurm", edit)).items() if k != "image-lock-stale"} == {}

    # The same path without the mount is still refused.
    def unmounted(data: dict[str, Any]) -> None:
        edit(data)
        data["slurm"]["container"]["mounts"].pop()

    assert "image-gate-nccl-tests" in rules(variant("onprem-slurm", unmounted))


def test_a_digest_pyxis_cannot_honour_is_refused_and_a_local_copy_is_accepted() -> None:
    digest = "sha256:" + "ab" * 32
    env = variant("onprem-slurm", lambda d: d["image"].update(digest=digest))
    assert "pyxis pulls image.ref by tag" in rules(env)["image-pyxis-digest"]
    copy_ = variant(
        "onprem-slurm",
        lambda d: (d["image"].update(digest=digest), d["slurm"]["container"].update(image="/lustre/images/verl.sqsh")),
    )
    assert "image-pyxis-digest" not in rules(copy_)


def test_gate_switched_off_needs_neither_tool() -> None:
    def edit(data: dict[str, Any]) -> None:
        data["image"]["contents"].update(ncclTests=False, grpoInfra=False)
        data["job"].setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False

    # Without grpo-infra in the image its lock's inputs change too: that is the lock rule's business.
    assert {k: v for k, v in rules(variant("onprem-slurm", edit)).items() if k != "image-lock-stale"} == {}


def test_slurm_token_auth_needs_ray_2_52_too() -> None:
    env = variant("local-slurm", lambda d: d["image"]["contents"].update(ray="2.51.0"))
    assert "use a newer image or set slurm.rayAuth: disabled" in rules(env)["image-token-auth"]
    off = variant(
        "local-slurm", lambda d: (d["image"]["contents"].update(ray="2.51.0"), d["slurm"].update(rayAuth="disabled"))
    )
    assert "image-token-auth" not in rules(off)


def _override(version: str, key: str, value: Any = 1) -> dict[str, str]:
    def edit(data: dict[str, Any]) -> None:
        data["image"]["contents"]["verl"] = version
        data["job"].setdefault("overrides", {})[key] = value

    return rules(variant("eks-prod", edit))


def test_override_keys_are_judged_by_the_declared_verl_releases_own_config() -> None:
    # In verl 0.9.1's trainer config, not in 0.7.0's (both from their wheels).
    new_key = "actor_rollout_ref.actor.entropy_from_logits_chunk_size"
    assert "verl-override-key" not in _override("0.9.1", new_key)
    assert f"{new_key} is not a key of verl 0.7.0's trainer config" in _override("0.7.0", new_key)["verl-override-key"]
    # And the other way round: removed after 0.7.0.
    old_key = "reward_model.strategy"
    assert "verl-override-key" not in _override("0.7.0", old_key, "fsdp")
    assert "verl-override-key" in _override("0.9.1", old_key, "fsdp")


def test_an_added_key_is_allowed() -> None:
    assert "verl-override-key" not in _override("0.9.1", "+trainer.my_new_key")


def test_a_verl_release_without_a_stored_config_is_refused() -> None:
    line = rules(variant("gke-dev", lambda d: d["image"]["contents"].update(verl="0.6.0")))["image-verl-unsupported"]
    assert "verl 0.6.0 has no stored trainer config" in line and "0.9.1" in line


def test_a_build_pairs_the_engine_verl_pins() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"]["engine"].update(version="0.23.0"))
    assert "verl 0.9.1's `vllm` extra requires vllm==0.24.0" in rules(env)["image-engine-pairing"]
    # verl 0.7.0 pairs with a range of vLLM releases (>=0.8.5,<=0.12.0 in its METADATA).
    ok = variant(
        "gke-dev", lambda d: d["image"]["contents"].update(verl="0.7.0", engine={"name": "vllm", "version": "0.11.0"})
    )
    assert "image-engine-pairing" not in rules(ok)


def test_python_outside_verls_range_is_refused() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].update(python="3.13"))
    assert "verl 0.9.1 requires Python >=3.10,<3.13" in rules(env)["image-python"]


def test_rollout_engine_comes_from_the_image() -> None:
    from grpo_infra import verl

    assert dict(verl.overrides(stack("onprem-k8s")))["actor_rollout_ref.rollout.name"] == "sglang"
    assert dict(verl.overrides(stack("eks-prod")))["actor_rollout_ref.rollout.name"] == "vllm"


def test_check_cli_refuses_the_verlai_image(tmp_path: Path) -> None:
    text = (ROOT / "stacks" / "Pulumi.eks-prod.yaml").read_text()
    doc = yaml.safe_load(text)
    env = doc["config"]["grpo-infra:environment"]
    env["image"] = VERLAI_SGLANG
    env["job"]["rollout"]["engine"] = "vllm"
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks" / "Pulumi.verlai.yaml").write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["check", "verlai", "--root", str(tmp_path)])
    assert result.exit_code == 1, result.output
    for rule in ("image-verl-missing", "image-engine", "image-efa", "image-token-auth"):
        assert rule in result.output
    out = tmp_path / "out"
    synth = CliRunner().invoke(app, ["synth", "verlai", "--root", str(tmp_path), "--out", str(out)])
    assert synth.exit_code == 1 and not out.exists()


def test_a_prebuilt_image_on_an_rdma_pool_must_declare_the_verbs_userspace() -> None:
    from .conftest import variant

    def prebuilt(data: dict) -> None:  # type: ignore[type-arg]
        data["image"].pop("build")

    env = variant("onprem-k8s", prebuilt)
    assert [v.rule for v in violations(env) if v.rule == "image-rdma"] == ["image-rdma"]
    ok = variant("onprem-k8s", lambda d: (prebuilt(d), d["image"]["contents"].update(rdma=True)))
    assert not [v for v in violations(ok) if v.rule == "image-rdma"]
    # A built image gets it from its pool, unless the stack turns it off.
    assert not [v for v in violations(variant("onprem-k8s", lambda d: None)) if v.rule == "image-rdma"]
    off = variant("onprem-k8s", lambda d: d["image"]["contents"].update(rdma=False))
    assert "image-rdma" in [v.rule for v in violations(off)]
