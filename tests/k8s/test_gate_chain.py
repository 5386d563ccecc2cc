"""The RayJob's entrypoint through real Ray: the fabric verdict stops the job before verl starts.

KubeRay's submitter pod pastes the entrypoint into a bash line after `ray job submit ... --`; Ray's CLI
re-quotes the arguments and its job supervisor runs them with a shell on the head, in the head's
environment. Here a real Ray head (with its job server) plays the head pod; only `python3` on the
head's PATH is a stand-in, because neither verl nor an NCCL all-reduce can run on this machine: it
records what reaches it, and exits as the gate's verdict would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.k8s import ray_job
from grpo_infra.k8s.gate import GATE_MOUNT
from grpo_infra.k8s.rayjob import WORLD_SIZE_FILE
from grpo_infra.k8s.shipped import RESUME_FILE, RESUME_MOUNT
from grpo_infra.preflight.gate import MODULE
from tests import rayhead
from tests.conftest import unavailable

from .conftest import variant

RAY = Path(sys.executable).with_name("ray")
HEAD_PYTHONPATH = "/home/ray/site"  # what the head image's environment holds


@dataclass
class Head:
    dashboard: str  # http://127.0.0.1:PORT, where `ray job submit` talks to
    calls: Path  # one JSON line per python3 the head ran
    gate_exit: Path  # the exit status the stand-in gate returns


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A real Ray head with its dashboard (the job server), stopped by its own process group."""
    if not RAY.exists():
        unavailable("ray is not installed in this venv")
    where = tmp_path_factory.mktemp("head")
    bin_dir, temp = where / "bin", Path(f"/tmp/rg-head-{os.getpid()}-{where.name}")
    bin_dir.mkdir()
    calls, gate_exit = where / "calls.jsonl", where / "gate-exit"
    gate_exit.write_text("0")
    (bin_dir / "python3").write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'pythonpath': os.environ.get('PYTHONPATH'),"
        " 'where': os.environ.get('WHERE')}) + '\\n')\n"
        f"sys.exit(int(open({str(gate_exit)!r}).read()) if sys.argv[1:3] == ['-m', {MODULE!r}] else 0)\n"
    )
    (bin_dir / "python3").chmod(0o755)
    dashboard = rayhead.free_port()
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": HEAD_PYTHONPATH,
        "WHERE": "head",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    ports = {
        "port": rayhead.free_port(),
        "dashboard-port": dashboard,
        "dashboard-agent-listen-port": rayhead.free_port(),
        "dashboard-agent-grpc-port": rayhead.free_port(),
        "ray-client-server-port": rayhead.free_port(),
        "metrics-export-port": rayhead.free_port(),
        "runtime-env-agent-port": rayhead.free_port(),
    }
    process = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--temp-dir={temp}", "--disable-usage-stats",
         *(f"--{k}={v}" for k, v in ports.items())],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{dashboard}"
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/version", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("the Ray head's job server did not come up within 90 s")
                time.sleep(0.5)
        yield Head(url, calls, gate_exit)
    finally:
        rayhead.stop(process)
        shutil.rmtree(temp, ignore_errors=True)


def _submit(head: Head, entrypoint: str, gate_exit: int) -> tuple[int, list[dict[str, Any]]]:
    """Run the entrypoint as KubeRay's submitter pod would; return the submitter's status and the calls."""
    head.gate_exit.write_text(str(gate_exit))
    head.calls.unlink(missing_ok=True)
    submitter_line = f"ray job submit --address {head.dashboard} -- {entrypoint}"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "PYTHONPATH": "/submitter",
        "WHERE": "submitter",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    run = subprocess.run(["bash", "-ce", "--", submitter_line], env=env, capture_output=True, text=True, timeout=180)
    lines = head.calls.read_text().splitlines() if head.calls.exists() else []
    return run.returncode, [json.loads(line) for line in lines]


# eks-prod's gate, written from the stack file and docs/nccl-preflight.md (EFA, 4 nodes: 356.99 GB/s
# expected, the published 4 x p5.48xlarge busbw, fail under 0.8 of it; 8 GiB all-reduce, 20 iterations,
# 300 s), not from the code that renders it.
EKS_GATE = {
    "--fabric": "efa",
    "--gpus-per-node": "8",
    "--nodes": "4",
    "--backend": "nccl",
    "--expected-busbw": "356.99",
    "--fraction": "0.8",
}


def _driver(call: dict[str, Any]) -> list[str]:
    """What a python3 call on the head runs: verl's argv (`-m verl...`), read through the resume rule, which
    the head runs from its shipped ConfigMap around verl (`grpo_infra.k8s.rayjob.resume_guard`)."""
    argv = call["argv"]
    if argv[:1] == [f"{RESUME_MOUNT}/{RESUME_FILE}"]:
        wrapped = argv[argv.index("--") + 1 :]
        assert wrapped[0] == "python3", wrapped
        return wrapped[1:]
    return argv


def _options(argv: list[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(0, len(argv) - 1) if argv[i].startswith("--")}


def _experiment(raw: dict[str, Any]) -> None:
    raw["job"]["experiment"] = "it's a run"  # a space and a quote: re-quoted by Ray, run by a shell


def _checkpoints_in(where: Path) -> Any:
    """The job's checkpoint directory moved to `where` (the pods' mount does not exist on this machine)."""

    def change(raw: dict[str, Any]) -> None:
        raw["job"]["checkpoint"]["dir"] = str(where)

    return change


@pytest.mark.parametrize("gate_exit", [0, 1])
def test_the_verdict_stops_the_job_before_training(head: Head, gate_exit: int, tmp_path: Path) -> None:
    env = variant("eks-prod", _experiment, _checkpoints_in(tmp_path / "ckpt"))
    code, calls = _submit(head, ray_job(env)["spec"]["entrypoint"], gate_exit)
    assert {c["where"] for c in calls} == {"head"}, "gate and verl run on the head, not in the submitter pod"
    gate = calls[0]
    assert gate["argv"][:2] == ["-m", MODULE]
    assert EKS_GATE.items() <= _options(gate["argv"][2:]).items(), gate["argv"]
    assert gate["pythonpath"] == f"{GATE_MOUNT}:{HEAD_PYTHONPATH}", "the gate imports the shipped code first"
    if gate_exit:
        assert code != 0, "a failing verdict fails the job"
        assert len(calls) == 1, "verl must not start after a failing verdict"
    else:
        assert code == 0
        assert len(calls) == 2
        verl_call = calls[1]
        verl_argv = _driver(verl_call)
        assert verl_argv[:2] == ["-m", "verl.trainer.main_ppo"]
        assert "trainer.nnodes=4" in verl_argv and "trainer.n_gpus_per_node=8" in verl_argv
        # One argument, in Hydra's quoted-value grammar (a quote inside escaped with a backslash).
        assert "trainer.experiment_name='it\\'s a run'" in verl_argv, verl_argv
        assert verl_call["pythonpath"] == HEAD_PYTHONPATH, "only the gate sees the shipped code"


def test_gate_off_chain_runs_verl_alone(head: Head, tmp_path: Path) -> None:
    def gate_off(raw: dict[str, Any]) -> None:
        raw["job"].setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False

    env = variant("eks-prod", gate_off, _checkpoints_in(tmp_path / "ckpt"))
    code, calls = _submit(head, ray_job(env)["spec"]["entrypoint"], gate_exit=1)
    assert code == 0
    assert [(_driver(c)[:2], c["where"]) for c in calls] == [(["-m", "verl.trainer.main_ppo"], "head")]


def test_a_retry_with_another_world_size_is_refused_before_verl(head: Head, tmp_path: Path) -> None:
    """verl cannot resume checkpoints of another world size (verl#2265): an attempt of another gang size on
    the job's checkpoint directory stops with one line, and verl never starts."""
    where = _checkpoints_in(tmp_path / "ckpt")
    first = variant("eks-prod", where)
    code, calls = _submit(head, ray_job(first)["spec"]["entrypoint"], gate_exit=0)
    assert code == 0 and [_driver(c)[:2] for c in calls][-1] == ["-m", "verl.trainer.main_ppo"]
    assert (tmp_path / "ckpt" / WORLD_SIZE_FILE).read_text().strip() == "4x8"

    def fewer_nodes(raw: dict[str, Any]) -> None:
        raw["job"]["nodes"] = 2

    smaller = variant("eks-prod", where, fewer_nodes)
    code, calls = _submit(head, ray_job(smaller)["spec"]["entrypoint"], gate_exit=0)
    assert code != 0, "an attempt on fewer nodes must fail"
    assert all(_driver(c)[:2] != ["-m", "verl.trainer.main_ppo"] for c in calls), "verl must not start"
    again = variant("eks-prod", where)
    code, calls = _submit(head, ray_job(again)["spec"]["entrypoint"], gate_exit=0)
    assert code == 0, "the same gang size resumes"
