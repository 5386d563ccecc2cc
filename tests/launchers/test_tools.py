"""Rendered SkyPilot tasks and dstack configurations, loaded by SkyPilot's and dstack's own parsers
(in .venv-launchers), and bad input those parsers reject refused by our spec or `check` first."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra import synth
from grpo_infra.check import violations
from grpo_infra.spec import ENVIRONMENT_KEY, SpecError, environment_from_config, load_stack
from grpo_infra.spec.load import with_lock
from tests.conftest import ROOT, unavailable

PARSER = Path(__file__).with_name("tool_parse.py")


def launcher_python() -> str:
    python = os.environ.get("GRPO_LAUNCHERS_PYTHON") or str(ROOT / ".venv-launchers" / "bin" / "python")
    if not Path(python).exists():
        unavailable(f"no SkyPilot/dstack venv at {python} (scripts/setup.sh makes .venv-launchers)")
    return python


def parse(kind: str, files: list[Path], cwd: Path, home: Path) -> list[dict[str, Any]]:
    """The tool's verdict on each file: SkyPilot resolves file_mounts from the directory it runs in."""
    proc = subprocess.run(
        [launcher_python(), str(PARSER), kind, *map(str, files)],
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def rendered(stack: str, where: Path) -> Path:
    env = load_stack(stack, ROOT).environment
    synth.write_tree(synth.render(env), where / stack)
    return where / stack


# gke-dev's image section, written out: SkyPilot pulls the built image, not a stock one.
IMAGE = "us-docker.pkg.dev/ml-dev-project/grpo/verl:0.9.1-vllm0.24.0-ray2.60.0"


def test_skypilot_accepts_the_gke_dev_task(tmp_path: Path) -> None:
    folder = rendered("gke-dev", tmp_path) / "skypilot"
    (result,) = parse("skypilot", [folder / "task.yaml"], folder, tmp_path)
    assert result["ok"], result
    # gke-dev: 2 nodes of 8 H100, SkyPilot on Kubernetes, the job's image, no port opened.
    assert result["num_nodes"] == 2
    assert result["accelerators"] == {"H100": 8}
    assert result["cloud"] == "Kubernetes"
    assert IMAGE in json.dumps(result["image_id"])
    assert result["ports"] is None
    assert result["envs"] == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "=eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        # torch's NCCL watchdog (grpo_infra/watchdog.py)
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480",
        "GRPO_INFRA_COLLECTIVE_TIMEOUT_S": "600",
    }
    raw = yaml.safe_load((folder / "task.yaml").read_text())
    # Secrets by name only: the values come from `sky launch --secret NAME`.
    assert raw["secrets"] == {"WANDB_API_KEY": None, "RAY_AUTH_TOKEN": None}
    assert "trainer.nnodes=2" in raw["run"] and "trainer.n_gpus_per_node=8" in raw["run"]
    # On gke-dev's own Kueue-managed cluster, every pod SkyPilot creates carries the tenant's LocalQueue.
    pod = result["cluster_config_overrides"]["kubernetes"]["pod_config"]
    assert pod["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "dev"}


def test_dstack_accepts_the_eks_prod_task_and_fleet(tmp_path: Path) -> None:
    folder = rendered("eks-prod", tmp_path) / "dstack"
    task, fleet = parse("dstack", [folder / "task.dstack.yml", folder / "fleet.dstack.yml"], folder, tmp_path)
    assert task["ok"], task
    assert fleet["ok"], fleet
    # eks-prod: 4 nodes of 8 H100 over EFA; secrets taken from the shell running `dstack apply`.
    assert (task["type"], task["nodes"], task["gpu_name"], task["gpu_count"]) == ("task", 4, ["H100"], [8, 8])
    assert task["shell"] == "bash"
    assert task["env"]["FI_PROVIDER"] == "efa"
    # Secrets are dstack secrets: references only, filled from `dstack secret set NAME` at run time.
    for name in ("WANDB_API_KEY", "HF_TOKEN", "RAY_AUTH_TOKEN"):
        assert task["env"][name] == "${{ secrets." + name + " }}"
    assert task["ports"] == [20001]
    assert task["fleets"] == ["grpo-h100"]
    assert task["files"] == [["gate", "/opt/grpo-infra"]]
    # An SSH fleet of the team's four hosts, one cluster network: the hosts that mount FSx.
    assert fleet["placement"] == "cluster"
    assert fleet["ssh"] == {
        "user": "ubuntu",
        "identity_file": "~/.ssh/grpo-h100.pem",
        "hosts": ["10.0.64.11", "10.0.64.12", "10.0.64.13", "10.0.64.14"],
    }
    # The model, the data and the checkpoints: the hosts' shared FSx mount, as dstack's instance volumes.
    assert task["volumes"] == [
        ["/fsx/models", "/models"],
        ["/fsx/data", "/data"],
        ["/fsx/checkpoints", "/checkpoints"],
    ]


def test_skypilot_mounts_the_gke_dev_buckets(tmp_path: Path) -> None:
    folder = rendered("gke-dev", tmp_path) / "skypilot"
    (result,) = parse("skypilot", [folder / "task.yaml"], folder, tmp_path)
    assert result["ok"], result
    # Model and data cached from the bucket; checkpoints streamed (MOUNT), so every node sees every shard.
    assert result["storage_mounts"] == {
        "/models": ["gs://ml-dev-grpo/models", "MOUNT_CACHED"],
        "/data": ["gs://ml-dev-grpo/data", "MOUNT_CACHED"],
        "/checkpoints": ["gs://ml-dev-grpo/checkpoints", "MOUNT"],
    }


def test_skypilot_takes_a_volume_beside_the_buckets(tmp_path: Path) -> None:
    """A `volume:` storage entry (a PVC made by `sky volumes apply`) lands in the task's `volumes`, as
    SkyPilot 0.14.1's own parser reads it, with the buckets still in `file_mounts`."""
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.gke-dev.yaml").read_text())["config"]
    secrets = {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}
    storage = config[ENVIRONMENT_KEY]["launchers"]["skypilot"]["storage"]
    storage.append({"path": "/scratch", "volume": "grpo-scratch", "shared": True})
    env = with_lock(environment_from_config(config, secrets, "gke-dev"), ROOT, "gke-dev", "gke-dev")
    synth.write_tree(synth.render(env), tmp_path / "gke-dev")
    folder = tmp_path / "gke-dev" / "skypilot"
    (result,) = parse("skypilot", [folder / "task.yaml"], folder, tmp_path)
    assert result["ok"], result
    assert result["volumes"] == {"/scratch": "grpo-scratch"}, result["volumes"]
    assert set(result["storage_mounts"]) == {"/models", "/data", "/checkpoints"}


STORAGE = [
    ("gke-dev", "skypilot", [{"path": "/models", "source": "gs://b/m"}, {"path": "/data", "source": "gs://b/d"}],
     [("launcher-path-storage", "grpo-infra:environment.job.checkpoint.dir")]),
    ("gke-dev", "skypilot", [{"path": "/", "source": "gs://b", "mode": "MOUNT_CACHED"}],
     [("checkpoint-shared", "grpo-infra:environment.launchers.skypilot.storage")]),
    ("gke-dev", "skypilot", [{"path": "/", "volume": "pvc"}],
     [("checkpoint-shared", "grpo-infra:environment.launchers.skypilot.storage")]),
    ("gke-dev", "skypilot", [{"path": "/", "volume": "pvc", "shared": True}], []),
    ("eks-prod", "dstack", [{"path": "/", "volume": "ckpt"}],
     [("checkpoint-shared", "grpo-infra:environment.launchers.dstack.storage")]),
    ("eks-prod", "dstack", [{"path": "/", "instancePath": "/mnt/disk"}],
     [("checkpoint-shared", "grpo-infra:environment.launchers.dstack.storage")]),
    ("eks-prod", "dstack", [], [
        ("launcher-path-storage", "grpo-infra:environment.job.modelPath"),
        ("launcher-path-storage", "grpo-infra:environment.job.data.trainFiles[0]"),
        ("launcher-path-storage", "grpo-infra:environment.job.data.valFiles[0]"),
        ("launcher-path-storage", "grpo-infra:environment.job.checkpoint.dir"),
    ]),
]  # fmt: skip


@pytest.mark.parametrize(("stack", "launcher", "storage", "expected"), STORAGE)
def test_check_refuses_launcher_paths_without_shared_storage(
    stack: str, launcher: str, storage: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    secrets = {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}
    config[ENVIRONMENT_KEY]["launchers"][launcher]["storage"] = storage
    env = with_lock(environment_from_config(config, secrets, stack), ROOT, stack, stack)
    found = [(v.rule, v.where) for v in violations(env) if v.rule in ("launcher-path-storage", "checkpoint-shared")]
    assert found == expected


# --- bad input: our spec refuses it with our message, and the tool, given the same value, refuses too ---

Patch = tuple[str, ...]
# (stack, path in the environment, bad value, tool, path in the rendered file, our message fragment)
REFUSED = [
    ("gke-dev", ("launchers", "skypilot", "infra"), "nocloud", "skypilot", ("resources", "infra"), "infra"),
    ("gke-dev", ("job", "nodes"), 0, "skypilot", ("num_nodes",), "job.nodes"),
    ("gke-dev", ("pools", 0, "gpu", "perNode"), 0, "skypilot", ("resources", "accelerators"), "perNode"),
    ("gke-dev", ("job", "env", "BAD-NAME"), "x", "skypilot", ("envs", "BAD-NAME"), "job.env"),
    ("eks-prod", ("launchers", "dstack", "fleet", "backends"), ["nocloud"], "dstack", ("backends",), "backends"),
    ("eks-prod", ("launchers", "dstack", "fleet", "placement"), "rack", "dstack", ("placement",), "placement"),
    ("eks-prod", ("launchers", "dstack", "gpuName"), "8H100", "dstack", ("resources", "gpu"), "gpuName"),
    ("eks-prod", ("job", "nodes"), 0, "dstack", ("nodes",), "job.nodes"),
]


def _set(document: Any, path: Patch, value: Any) -> None:
    for key in path[:-1]:
        document = document.setdefault(key, {}) if isinstance(document, dict) else document[key]
    document[path[-1]] = value


@pytest.mark.parametrize(("stack", "spec_path", "value", "tool", "file_path", "ours"), REFUSED)
def test_what_the_tools_reject_our_spec_refuses_first(
    stack: str, spec_path: Patch, value: Any, tool: str, file_path: Patch, ours: str, tmp_path: Path
) -> None:
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    secrets = {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}
    bad = copy.deepcopy(config)
    _set(bad[ENVIRONMENT_KEY], spec_path, value)
    with pytest.raises(SpecError) as refused:
        environment_from_config(bad, secrets, f"stacks/Pulumi.{stack}.yaml")
    assert ours in str(refused.value)

    # The same value where it would land in the rendered file: the tool rejects it too.
    folder = rendered(stack, tmp_path) / tool
    name = (
        "task.yaml"
        if tool == "skypilot"
        else ("fleet.dstack.yml" if file_path[0] in ("backends", "placement") else "task.dstack.yml")
    )
    document = yaml.safe_load((folder / name).read_text())
    landed = value
    if file_path == ("resources", "accelerators"):
        landed = f"H100:{value}"
    elif file_path == ("resources", "gpu"):
        landed = f"{value}:8"
    elif file_path[0] == "envs":
        document["envs"][file_path[1]] = value
    if file_path[0] != "envs":
        _set(document, file_path, landed)
    (folder / name).write_text(yaml.safe_dump(document))
    (result,) = parse(tool, [folder / name], folder, tmp_path)
    assert not result["ok"], f"{tool} accepted {file_path}={landed!r}"


def test_check_refuses_a_launcher_port_range_in_the_ephemeral_range() -> None:
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.gke-dev.yaml").read_text())["config"]
    config[ENVIRONMENT_KEY]["launchers"]["skypilot"]["rayPorts"] = {"start": 40000, "end": 40255}
    env = with_lock(environment_from_config(config, {"grpo-infra:wandbApiKey"}, "gke-dev"), ROOT, "gke-dev", "gke-dev")
    found = [(v.rule, v.where) for v in violations(env)]
    assert found == [("skypilot-ports-ephemeral", "grpo-infra:environment.launchers.skypilot.rayPorts")]


def test_check_refuses_a_launcher_interface_off_the_fabric() -> None:
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.gke-dev.yaml").read_text())["config"]
    config[ENVIRONMENT_KEY]["launchers"]["skypilot"]["interface"] = "ib0"
    env = with_lock(environment_from_config(config, {"grpo-infra:wandbApiKey"}, "gke-dev"), ROOT, "gke-dev", "gke-dev")
    assert [v.rule for v in violations(env)] == ["skypilot-interface"]
