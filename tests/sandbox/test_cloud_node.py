"""The node script of the SkyPilot task (`run`) and of the dstack task (`commands`), run for real on the
sandbox's three machines with the variables SkyPilot and dstack set: rank 0 forms the gang, passes the
fabric gate and runs the job; the workers leave when the head is gone; nothing is left running."""

from __future__ import annotations

import copy
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra import synth
from grpo_infra.sandbox.plan import Plan
from grpo_infra.spec import ENVIRONMENT_KEY, Environment, environment_from_config
from tests.conftest import ROOT
from tests.sandbox.nodes import BIN, CHECK_GANG, in_node_command, ray_processes

pytestmark = pytest.mark.sandbox


def cloud_variant() -> Environment:
    """local-slurm's job and pool, declared for SkyPilot and dstack too (placeholder GPU names)."""
    config = copy.deepcopy(yaml.safe_load((ROOT / "stacks" / "Pulumi.local-slurm.yaml").read_text())["config"])
    config[ENVIRONMENT_KEY]["launchers"] = {
        "skypilot": {"infra": "k8s", "accelerator": "sim"},
        "dstack": {"gpuName": "sim"},
    }
    return environment_from_config(config, set(), "local-slurm (cloud launchers)")


def node_variables(tool: str, plan: Plan, rank: int) -> dict[str, str]:
    ips = "\n".join(n.address for n in plan.nodes)
    if tool == "skypilot":
        return {"SKYPILOT_NODE_IPS": ips, "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    return {
        "DSTACK_NODES_IPS": ips,
        "DSTACK_MASTER_NODE_IP": plan.nodes[0].address,
        "DSTACK_NODE_RANK": str(rank),
        "DSTACK_NODES_NUM": "3",
        "DSTACK_GPUS_PER_NODE": "8",
    }


def node_script(tool: str, files: dict[str, str]) -> str:
    if tool == "skypilot":
        return yaml.safe_load(files["skypilot/task.yaml"])["run"]
    (command,) = yaml.safe_load(files["dstack/task.dstack.yml"])["commands"]
    return command


@pytest.mark.parametrize("tool", ["skypilot", "dstack"])
def test_cloud_node_script_runs_the_gang_and_leaves_nothing(tool: str, local_sandbox: Plan, tmp_path: Path) -> None:
    files = synth.render(cloud_variant())
    script = tmp_path / "node.sh"
    script.write_text(node_script(tool, files))
    home = tmp_path / "home"
    # SkyPilot's file_mounts / dstack's files put the gate's package here.
    gate = {p.removeprefix(f"{tool}/gate/"): t for p, t in files.items() if p.startswith(f"{tool}/gate/")}
    for rel, text in gate.items():
        (home / ".grpo-infra" / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / ".grpo-infra" / rel).write_text(text)
    (tmp_path / "check_gang.py").write_text(CHECK_GANG)
    common: dict[str, Any] = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "GRPO_RAY_TMPDIR": str(local_sandbox.ray_tmp),
        "GRPO_RAY_READY_TIMEOUT": "120",
        "GRPO_ENTRYPOINT": f"python3 {tmp_path / 'check_gang.py'}",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    procs = []
    for rank, node in enumerate(local_sandbox.nodes):
        env = {**common, **node_variables(tool, local_sandbox, rank)}
        procs.append(
            subprocess.Popen(
                in_node_command(local_sandbox, node.name, ["bash", str(script)]),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [0, 0, 0], "\n\n".join(o[-3000:] for o in outputs)
    head = outputs[0]
    assert "grpo: joined 3/3 nodes, 24/24 GPUs" in head
    assert "fabric gate" in head.lower() or "PASS" in head
    assert "check-gang: 3 nodes, 24 GPUs" in head and "gpus per host [8, 8, 8]" in head
    for worker in outputs[1:]:
        assert "the head's Ray has stopped; stopping this worker" in worker
    assert ray_processes(local_sandbox.ray_tmp / "grpo-ray-0") == []
