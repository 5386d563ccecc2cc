"""GKE's driver follows the image's CUDA: never DEFAULT when the image needs a newer branch."""

from __future__ import annotations

from grpo_infra.check import violations
from grpo_infra.image.driver import gpu_driver_version
from grpo_infra.nodepools import node_pool_args
from grpo_infra.spec import Environment, load_stack

from .conftest import ROOT


def gke_dev(edit=None) -> Environment:
    data = load_stack("gke-dev", ROOT).environment.model_dump(by_alias=True, exclude_none=True, mode="json")
    if edit:
        edit(data)
    return Environment.model_validate(data)


def driver(env: Environment) -> str:
    accelerator = node_pool_args(env, env.gang.pool)["node_config"]["guest_accelerators"][0]
    return accelerator["gpu_driver_installation_config"]["gpu_driver_version"]


def test_a_cuda_13_image_gets_gkes_latest_driver() -> None:
    env = gke_dev()
    assert env.image.contents.cuda == "13.0"  # needs >= 580.65.06
    assert driver(env) == "LATEST" == gpu_driver_version(env, env.gang.pool)


def test_an_older_cuda_keeps_gkes_default() -> None:
    env = gke_dev(lambda d: d["image"]["contents"].update(cuda="12.4"))
    assert driver(env) == "DEFAULT"


def test_asking_for_default_with_a_cuda_13_image_is_refused() -> None:
    env = gke_dev(lambda d: d["pools"][0]["gke"].update(gpuDriverVersion="DEFAULT"))
    found = [v for v in violations(env) if v.rule == "gke-driver-version"]
    assert len(found) == 1 and found[0].where.endswith("pools[0].gke.gpuDriverVersion")
    assert "580.65.06" in found[0].message


def test_installing_the_driver_yourself_is_allowed() -> None:
    env = gke_dev(lambda d: d["pools"][0]["gke"].update(gpuDriverVersion="INSTALLATION_DISABLED"))
    assert driver(env) == "INSTALLATION_DISABLED"
    assert [v for v in violations(env) if v.rule == "gke-driver-version"] == []
