"""The fabric gate in the RayJob: its code shipped as a ConfigMap, mounted on the head, run before verl."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra import verl
from grpo_infra.k8s import objects, ray_job
from grpo_infra.k8s.gate import (
    GATE_MOUNT,
    GATE_VOLUME,
    PYTHONPATH_PREFIX,
    gate_config_map,
    gate_config_map_name,
    gate_files,
)
from grpo_infra.k8s.rayjob import resume_guard, world_size_guard
from grpo_infra.k8s.shipped import (
    CONFIG_MAP_LIMIT_BYTES,
    guard_config_map,
    guard_config_map_name,
    resume_config_map,
    resume_config_map_name,
)
from grpo_infra.preflight.gate import MODULE
from grpo_infra.pulumi_graph import Graph, record
from grpo_infra.spec import Environment, load_stack
from grpo_infra.validate import validate_objects
from tests.conftest import ROOT

from .conftest import K8S_STACKS, by_kind, env_of, variant, verl_job
from .entrypoints import unguarded

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RAYJOB = "kubernetes:ray.io/v1:RayJob"


def _gate_off(raw: dict[str, Any]) -> None:
    raw["job"].setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False


def _head(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def _workers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [g["template"]["spec"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]


def _script(env: Environment) -> str:
    argv = shlex.split(ray_job(env)["spec"]["entrypoint"])
    assert argv[:2] == ["sh", "-c"] and len(argv) == 3, argv
    return argv[2]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_gate_code_ships_as_a_configmap_in_the_tenant_namespace(stack: str) -> None:
    env = verl_job(stack)
    # The gate's, the image guard's and the resume rule's (grpo_infra/k8s/shipped.py).
    maps = by_kind(objects(env), "ConfigMap")
    names = [gate_config_map_name(env), guard_config_map_name(env), resume_config_map_name(env)]
    assert [m["metadata"]["name"] for m in maps] == names
    code = maps[0]
    assert code["metadata"]["namespace"] == env.job.tenant
    assert code["metadata"]["name"].startswith(env.job.name)
    assert code["metadata"]["labels"]["grpo-infra/job"] == env.job.name
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in code["data"]), sorted(code["data"])
    installed = Path(__import__("grpo_infra.preflight").preflight.__file__).parent
    modules = {f"grpo_infra/preflight/{p.name}" for p in installed.glob("*.py")}
    assert set(gate_files()) == modules | {"grpo_infra/__init__.py"}
    assert gate_files()["grpo_infra/__init__.py"] == ""
    assert gate_files()["grpo_infra/preflight/ray_allreduce.py"] == (installed / "ray_allreduce.py").read_text()
    # The ConfigMap objects are ordered before the RayJob that mounts them.
    kinds = [o["kind"] for o in objects(env)]
    assert kinds.index("ConfigMap") < kinds.index("RayJob")


def test_the_configmap_stays_under_one_mebibyte_and_renders_identically() -> None:
    env = env_of("eks-prod")
    code = gate_config_map(env)
    assert code is not None
    size = len(json.dumps(code).encode()), len(yaml.safe_dump(code).encode())
    assert max(size) < CONFIG_MAP_LIMIT_BYTES, size
    assert yaml.safe_dump(code) == yaml.safe_dump(gate_config_map(env_of("eks-prod")))


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_only_the_head_mounts_the_code_read_only(stack: str) -> None:
    env = verl_job(stack)
    job = ray_job(env)
    code = gate_config_map(env)
    assert code is not None
    head = _head(job)
    volume = next(v for v in head["volumes"] if v["name"] == GATE_VOLUME)
    assert volume["configMap"]["name"] == code["metadata"]["name"]
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert set(items) == set(code["data"])
    assert sorted(items.values()) == sorted(gate_files())
    mount = next(m for m in head["containers"][0]["volumeMounts"] if m["name"] == GATE_VOLUME)
    assert mount == {"name": GATE_VOLUME, "mountPath": GATE_MOUNT, "readOnly": True}
    for worker in _workers(job):
        assert GATE_VOLUME not in {v["name"] for v in worker["volumes"]}


# The gate's options per shipped stack, written from the stack files and docs/nccl-preflight.md (fabric
# calibration: EFA on 4 x p5 356.99 GB/s at 8192 MiB, the published 4-node busbw; RoCE on 3 nodes 365.84 GB/s
# at 1024 MiB, the estimate from 4 NDR nodes; none: no threshold at 1024 MiB; fraction 0.8, 20 iterations, 300 s).
GATE_ARGV = {
    "eks-prod": "--fabric efa --gpus-per-node 8 --nodes 4 --backend nccl --fraction 0.8 --size-mib 8192 "
    "--iters 20 --timeout 300 --expected-busbw 356.99",
    "gke-dev": "--fabric none --gpus-per-node 8 --nodes 2 --backend nccl --fraction 0.8 --size-mib 1024 "
    "--iters 20 --timeout 300",
    "onprem-k8s": "--fabric roce --gpus-per-node 8 --nodes 3 --backend nccl --fraction 0.8 --size-mib 1024 "
    "--iters 20 --timeout 300 --expected-busbw 365.84",
    "local-k8s": "--fabric none --gpus-per-node 8 --nodes 3 --backend nccl --fraction 0.8 --size-mib 1024 "
    "--iters 20 --timeout 300",
    # Disaggregated: the trainer's gang (2 × a3-h100), whose collectives train; not the rollout's L4 nodes.
    "gke-disagg": "--fabric none --gpus-per-node 8 --nodes 2 --backend nccl --fraction 0.8 --size-mib 1024 "
    "--iters 20 --timeout 300",
}


def test_every_kubernetes_stack_has_a_hand_written_gate_expectation() -> None:
    assert sorted(GATE_ARGV) == sorted(K8S_STACKS)


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_entrypoint_runs_the_gate_with_the_stacks_options_then_verl(stack: str) -> None:
    env = verl_job(stack)
    gate, _, training = _script(env).partition(" && ")
    assert shlex.split(gate) == [PYTHONPATH_PREFIX, "python3", "-m", MODULE, *GATE_ARGV[stack].split()]
    assert shlex.split(gate)[0] == "PYTHONPATH=/opt/grpo-infra${PYTHONPATH:+:$PYTHONPATH}"
    world = world_size_guard(env)
    *before, last = training.rsplit(" && ", 1) if world else [training]
    assert before == ([world] if world else [])
    assert unguarded(last) == verl.shell_command(env)


def test_gate_off_means_no_configmap_no_mount_and_verl_alone() -> None:
    env = variant("eks-prod", _gate_off)
    rendered = objects(env)
    assert by_kind(rendered, "ConfigMap") == [guard_config_map(env), resume_config_map(env)]
    job = by_kind(rendered, "RayJob")[0]
    assert job["spec"]["entrypoint"] == shlex.join(
        ["sh", "-c", f"{world_size_guard(env)} && {resume_guard(env, verl.shell_command(env))}"]
    )
    for pod in [_head(job), *_workers(job)]:
        assert GATE_VOLUME not in {v["name"] for v in pod["volumes"]}
        assert GATE_VOLUME not in {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert validate_objects(rendered) == []


def test_the_configmap_validates_strictly_and_a_typo_fails() -> None:
    env = env_of("onprem-k8s")
    code = copy.deepcopy(by_kind(objects(env), "ConfigMap")[0])
    assert validate_objects([code]) == []
    code["dta"] = code.pop("data")
    assert any("'dta' was unexpected" in e for e in validate_objects([code]))


def _lay_out(code: dict[str, Any], volume: dict[str, Any], into: Path) -> None:
    """What the kubelet does with a configMap volume's `items`: each key's text at its path."""
    for item in volume["configMap"]["items"]:
        target = into / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code["data"][item["key"]], encoding="utf-8")


def test_the_shipped_files_alone_import_the_gate(tmp_path: Path) -> None:
    """No site-packages (`-S`: neither this project nor any third-party package), the repo not on the
    path: the ConfigMap's files are the whole of what the gate's driver imports."""
    env = env_of("eks-prod")
    job = ray_job(env)
    code = by_kind(objects(env), "ConfigMap")[0]
    volume = next(v for v in _head(job)["volumes"] if v["name"] == GATE_VOLUME)
    mount = tmp_path / "opt-grpo-infra"
    _lay_out(code, volume, mount)
    probe = (
        "import sys, grpo_infra.preflight.ray_allreduce as gate;"
        f"assert gate.__file__.startswith({str(mount)!r}), gate.__file__;"
        "assert not any(m == 'ray' or m.startswith(('ray.', 'torch', 'pydantic')) for m in sys.modules)"
    )
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(mount)}
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env=clean, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    helped = subprocess.run(
        [sys.executable, "-S", "-m", MODULE, "--help"], cwd=tmp_path, env=clean, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "--gpus-per-node" in helped.stdout, helped.stderr


@cache
def _graph(stack: str) -> Graph:
    return record(stack, ROOT)


@pytest.mark.parametrize("stack", [s for s in K8S_STACKS if env_of(s).job.preflight.nccl.enabled])
def test_pulumi_registers_the_configmap_inside_the_rayjob_component(stack: str) -> None:
    env = env_of(stack)
    g = _graph(stack)
    code = gate_config_map(env)
    assert code is not None
    meta = code["metadata"]
    registered = g.named(CONFIG_MAP, f"{meta['namespace']}-{meta['name']}")
    assert registered.inputs["data"] == code["data"]
    assert registered.inputs["metadata"] == meta
    assert registered.parent is not None and g[registered.parent].type == "grpo-infra:k8s:GrpoRayJob"
    job = g.named(RAYJOB, f"{env.job.tenant}-{env.job.name}")
    assert job.parent == registered.parent
    assert registered.urn in g.upstream(job.urn), "the RayJob must wait for the code its head mounts"
    # The resume rule's program and the experiment's identity likewise (grpo_infra/k8s/shipped.py).
    resume = resume_config_map(env)
    assert resume is not None
    shipped = g.named(CONFIG_MAP, f"{env.job.tenant}-{resume['metadata']['name']}")
    assert shipped.inputs["data"] == resume["data"] and shipped.parent == registered.parent
    assert shipped.urn in g.upstream(job.urn), "the RayJob must wait for the resume rule its head runs"


def test_pulumi_registers_no_configmap_with_the_gate_off(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.onprem-k8s.yaml").read_text())
    _gate_off(document["config"]["grpo-infra:environment"])
    (tmp_path / "stacks" / "Pulumi.onprem-k8s.yaml").write_text(yaml.safe_dump(document))
    for name in ("Pulumi.yaml",):
        if (ROOT / name).exists():
            (tmp_path / name).write_text((ROOT / name).read_text())
    g = record("onprem-k8s", tmp_path)
    # The RDMA device plugin's config (kube-system), the image guard's and the resume rule's programs are left:
    # no gate code.
    env = load_stack("onprem-k8s", tmp_path).environment
    assert sorted((c.inputs["metadata"]["namespace"], c.inputs["metadata"]["name"]) for c in g.of_type(CONFIG_MAP)) == [
        ("kube-system", "rdma-devices"),
        (env.job.tenant, guard_config_map_name(env)),
        (env.job.tenant, resume_config_map_name(env)),
    ]
    assert g.of_type(RAYJOB)
