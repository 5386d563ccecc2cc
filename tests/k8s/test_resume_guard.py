"""A resumed RayJob must advance: its entrypoint, run for real with a fake verl, fails a resume that did not train.

The entrypoint is the rendered one (gate off: the gate needs a Ray head); `python3 -m verl.trainer.main_ppo`
resolves to a fake package that saves the steps it is told to in verl's tracker file and exits 0, as verl
0.9.1 did when it resumed at an epoch boundary and trained nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from grpo_infra.k8s import ray_job
from grpo_infra.k8s.rayjob import UNGUARDED_WARNING
from grpo_infra.lifecycle import CHECKPOINT_TRACKER
from tests.conftest import ROOT

from .conftest import variant
from .entrypoints import training_step, verl_argv

FAKE_VERL = """\
import os, pathlib, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
tracker = pathlib.Path(args["trainer.default_local_dir"]) / "latest_checkpointed_iteration.txt"
step = os.environ.get("FAKE_VERL_SAVES")
if step:
    tracker.write_text(step)
"""


def _stack(checkpoints: Path, grpo_infra: bool) -> Any:
    def change(raw: dict[str, Any]) -> None:
        raw["job"].setdefault("preflight", {}).setdefault("nccl", {})["enabled"] = False
        raw["job"]["checkpoint"]["dir"] = str(checkpoints)
        raw["image"].setdefault("contents", {})["grpoInfra"] = grpo_infra

    return variant("eks-prod", change)


def _run(
    tmp_path: Path, *, resumed_at: int | None, saves: int | None, grpo_infra: bool = True
) -> subprocess.CompletedProcess[str]:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    if resumed_at is not None:
        (checkpoints / CHECKPOINT_TRACKER).write_text(str(resumed_at))
    fake = tmp_path / "fake"
    (fake / "verl" / "trainer").mkdir(parents=True)
    for package in ("verl", "verl/trainer"):
        (fake / package / "__init__.py").write_text("")
    (fake / "verl" / "trainer" / "main_ppo.py").write_text(FAKE_VERL)
    entrypoint = ray_job(_stack(checkpoints, grpo_infra))["spec"]["entrypoint"]
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": f"{fake}:{ROOT}",
        **({"FAKE_VERL_SAVES": str(saves)} if saves is not None else {}),
    }
    return subprocess.run(["bash", "-c", entrypoint], env=env, capture_output=True, text=True, timeout=60)


def test_a_run_that_resumed_and_exited_0_without_stepping_fails_in_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path, resumed_at=40, saves=None)
    assert run.returncode == 1, run
    assert run.stderr.strip().splitlines()[-1] == (
        "grpo: ERROR: the run resumed at step 40 and exited 0 without saving a newer step (now 40): it did not train"
    )


def test_a_resumed_run_that_saved_a_newer_step_succeeds(tmp_path: Path) -> None:
    run = _run(tmp_path, resumed_at=40, saves=60)
    assert run.returncode == 0, run
    assert run.stderr == ""


def test_a_fresh_run_is_not_judged(tmp_path: Path) -> None:
    assert _run(tmp_path, resumed_at=None, saves=None).returncode == 0


def test_an_image_without_grpo_infra_runs_verl_after_one_warning_line(tmp_path: Path) -> None:
    run = _run(tmp_path, resumed_at=40, saves=None, grpo_infra=False)
    assert run.returncode == 0, run
    assert run.stderr.strip() == UNGUARDED_WARNING


def test_the_guard_reads_the_directory_verl_writes(tmp_path: Path) -> None:
    """The guard's --checkpoint-dir is verl's trainer.default_local_dir: the mount of the job's own subPath."""
    env = _stack(tmp_path, grpo_infra=True)
    entrypoint = ray_job(env)["spec"]["entrypoint"]
    step = training_step(entrypoint).split()
    directory = step[step.index("--checkpoint-dir") + 1]
    overrides = dict(a.split("=", 1) for a in verl_argv(entrypoint)[3:])
    assert directory == overrides["trainer.default_local_dir"] == env.job.checkpoint.dir
    head = ray_job(env)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    mount = next(m for m in head["volumeMounts"] if m["name"] == "checkpoints")
    assert mount["mountPath"] == directory and mount["subPath"] == env.job.name
