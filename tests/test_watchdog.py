"""torch's NCCL watchdog gets the stack's collective timeout on every path (issue 31, item 16).

verl 0.9.1 passes torch no process-group timeout and its backend string takes torch's 30-minute default;
every path (Kubernetes GPU pods, sbatch, SkyPilot, dstack, Ray by hand) must carry the watchdog's
variables and verl the overrides that apply the job's timeout (grpo_infra/watchdog.py)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from grpo_infra import synth, verl
from grpo_infra.k8s import ray_job
from grpo_infra.slurmgen.sbatch import job_environment
from grpo_infra.spec import Environment
from grpo_infra.torch_watchdog import HOOK, TIMEOUT_ENV, apply
from grpo_infra.watchdog import NCCL_TIMEOUT_KEY, SETUP_HOOK_KEY
from tests.k8s.conftest import env_of, variant
from tests.verl.test_overrides import _MISSING, TRAINER, _lookup

WATCHDOG = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    # torch's 480 s, below the 600 s collective timeout
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480",
    TIMEOUT_ENV: "600",
}


def _timeout(minutes: int) -> dict[str, str]:
    seconds = str(minutes * 60)
    return {**WATCHDOG, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": seconds, TIMEOUT_ENV: seconds}


def _with_timeout(stack: str, minutes: int) -> Environment:
    return variant(stack, lambda raw: raw["job"].update(collectiveTimeoutMinutes=minutes))


def _gpu_worker_env(env: Environment) -> list[dict[str, str]]:
    groups = ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    return [
        {v["name"]: v["value"] for v in c.get("env", []) if "value" in v}
        for g in groups
        for c in g["template"]["spec"]["containers"]
    ]


@pytest.mark.parametrize("stack", ["eks-prod", "gke-dev", "onprem-k8s", "gke-disagg"])
def test_every_kubernetes_worker_gets_the_watchdog(stack: str) -> None:
    for container in _gpu_worker_env(env_of(stack)):
        assert WATCHDOG.items() <= container.items()
    for container in _gpu_worker_env(_with_timeout(stack, 3)):
        assert _timeout(3).items() <= container.items()


@pytest.mark.parametrize("stack", ["onprem-slurm", "local-slurm"])
def test_every_slurm_process_gets_the_watchdog(stack: str) -> None:
    assert WATCHDOG.items() <= job_environment(env_of(stack)).items()
    assert _timeout(7).items() <= job_environment(_with_timeout(stack, 7)).items()
    sbatch = next(t for p, t in synth.render(_with_timeout(stack, 7)).items() if p.endswith(".sbatch"))
    assert f"export {TIMEOUT_ENV}='420'" in sbatch


def _launcher_env(files: dict[str, str], path: str) -> dict[str, str]:
    text = files[path]
    if path.endswith(".yaml") or path.endswith(".yml"):
        doc = yaml.safe_load(text)
        raw = doc.get("envs") or doc.get("env") or {}
        if isinstance(raw, list):  # dstack: ["NAME=value", ...]
            return dict(item.split("=", 1) for item in raw)
        return {k: str(v) for k, v in raw.items()}
    return {k: v for k, v in WATCHDOG.items() if f"{k}={v}" in text or f"{k}='{v}'" in text}


@pytest.mark.parametrize(
    ("stack", "path"),
    [("gke-dev", "skypilot/task.yaml"), ("eks-prod", "dstack/task.dstack.yml")],
)
def test_every_launcher_gets_the_watchdog(stack: str, path: str) -> None:
    assert WATCHDOG.items() <= _launcher_env(synth.render(env_of(stack)), path).items()


def test_ray_by_hand_gets_the_watchdog() -> None:
    files = synth.render(env_of("local-slurm"))
    scripts = {p: t for p, t in files.items() if p.startswith("ray/")}
    assert scripts, sorted(files)
    assert any(f"{TIMEOUT_ENV}=" in t for t in scripts.values()), sorted(scripts)


@pytest.mark.parametrize("stack", ["eks-prod", "onprem-slurm", "gke-disagg"])
def test_verl_gets_the_timeout_in_its_own_key(stack: str) -> None:
    assert dict(verl.overrides(env_of(stack)))[NCCL_TIMEOUT_KEY] == 600
    assert dict(verl.overrides(_with_timeout(stack, 20)))[NCCL_TIMEOUT_KEY] == 1200


def test_the_setup_hook_is_passed_only_to_an_image_that_carries_it() -> None:
    plain = env_of("eks-prod")
    assert not plain.image.contents.grpo_infra
    assert SETUP_HOOK_KEY not in dict(verl.overrides(plain))
    carrying = variant("eks-prod", lambda raw: raw["image"]["contents"].update(grpoInfra=True))
    assert dict(verl.overrides(carrying))[SETUP_HOOK_KEY] == HOOK


def test_the_hooks_key_adds_to_verls_ray_init_runtime_env() -> None:
    """`+` adds a key: its parent must be a dict in verl 0.9.1's trainer config and the key itself absent."""
    parent, leaf = SETUP_HOOK_KEY.removeprefix("+").rsplit(".", 1)
    node = _lookup(parent, TRAINER)
    assert node is not _MISSING and OmegaConf.is_dict(node)
    assert _lookup(f"{parent}.{leaf}", TRAINER) is _MISSING
    from ray.runtime_env import RuntimeEnv

    assert leaf in RuntimeEnv.known_fields


def _default_timeout() -> timedelta:
    from torch.distributed.distributed_c10d import Backend, _get_default_timeout

    # verl 0.9.1's backend string (verl/utils/distributed.py:89)
    return _get_default_timeout(Backend("cpu:gloo,cuda:nccl"))


@pytest.fixture
def restore_torch_defaults() -> Any:
    from torch.distributed import distributed_c10d

    saved = distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout
    yield
    distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout = saved


def test_without_the_hook_verls_process_group_waits_30_minutes(restore_torch_defaults: Any) -> None:
    assert _default_timeout() == timedelta(minutes=30)


def test_the_hook_makes_the_jobs_timeout_torchs_default(
    restore_torch_defaults: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, TIMEOUT_ENV, "180")
    apply()
    assert _default_timeout() == timedelta(seconds=180)
    from torch.distributed.distributed_c10d import Backend, _get_default_timeout

    assert _get_default_timeout(Backend.NCCL) == timedelta(seconds=180)


def test_the_timeout_is_bounded() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="collectiveTimeoutMinutes"):
        _with_timeout("eks-prod", 0)
    with pytest.raises(ValidationError, match="collectiveTimeoutMinutes"):
        _with_timeout("eks-prod", 121)
