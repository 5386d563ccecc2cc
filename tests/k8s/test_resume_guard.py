"""The resume rule in a RayJob, run for real: the rendered entrypoint with the head's shipped ConfigMap laid out
on disk and a fake verl. A resume that did not train fails; a checkpoint directory of another experiment
(the same job name, another model, data or algorithm) is refused in one line before verl starts; the same
experiment resumes. Every shipped Kubernetes stack runs the rule, whatever its image holds.

The entrypoint is the rendered one with the gate off (the gate needs a Ray head); `python3 -m
verl.trainer.main_ppo` resolves to a fake package that saves the steps it is told to in verl's tracker file
and exits 0, as verl 0.9.1 did when it resumed at an epoch boundary and trained nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import training
from grpo_infra.k8s import objects, ray_job
from grpo_infra.k8s.rayjob import entrypoint
from grpo_infra.k8s.shipped import RESUME_FILE, RESUME_MOUNT, RESUME_VOLUME, resume_config_map_name
from grpo_infra.lifecycle import resume
from grpo_infra.lifecycle.resume import CHECKPOINT_TRACKER, IDENTITY_FILE
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT

from .conftest import K8S_STACKS, variant, without_stand_ins
from .entrypoints import training_step, verl_argv

FAKE_VERL = """\
import os, pathlib, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
directory = pathlib.Path(args["trainer.default_local_dir"])
pathlib.Path(os.environ["FAKE_VERL_RAN"]).write_text("ran")
step = os.environ.get("FAKE_VERL_SAVES")
if step:
    (directory / "latest_checkpointed_iteration.txt").write_text(step)
"""


def _stack(stack: str, checkpoints: Path, learning_rate: float | None = None) -> Environment:
    def change(raw: dict[str, Any]) -> None:
        without_stand_ins(raw)
        raw["job"]["preflight"]["nccl"]["enabled"] = False
        raw["job"]["checkpoint"]["dir"] = str(checkpoints)
        if learning_rate is not None:
            raw["job"]["learningRate"] = learning_rate

    return variant(stack, change)


def _shipped(env: Environment, root: Path) -> Path:
    """The head's resume ConfigMap as the kubelet lays it out (`items[].path` under the mount)."""
    config_map = next(o for o in objects(env) if o["metadata"]["name"] == resume_config_map_name(env))
    for key, text in config_map["data"].items():
        (root / key).write_text(text)
    return root


def _run(
    tmp_path: Path,
    env: Environment,
    *,
    saves: int | None = None,
    verl_ran: Path | None = None,
    cluster: Environment | None = None,
) -> subprocess.CompletedProcess[str]:
    """`env`'s RayJob entrypoint; with `cluster`, `env` submitted (`grpo-infra submit`) to `cluster`'s running
    RayCluster, whose head mounts `cluster`'s ConfigMap."""
    mount = tmp_path / "opt-grpo-infra-resume"
    mount.mkdir(exist_ok=True)
    fake = tmp_path / "fake"
    # verl's two trainers (colocated, and the fully asynchronous one of a disaggregated layout), both fake.
    for module in ("verl/trainer/main_ppo", "verl/experimental/fully_async_policy/fully_async_main"):
        path = fake / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.relative_to(fake).parents:
            if package != Path("."):
                (fake / package / "__init__.py").write_text("")
        path.write_text(FAKE_VERL)
    command = entrypoint(env, gate=False) if cluster is not None else ray_job(env)["spec"]["entrypoint"]
    command = command.replace(RESUME_MOUNT, str(_shipped(cluster or env, mount)))
    # An image without grpo-infra: `python3` without site-packages (where grpo-infra is installed here), run
    # outside the checkout; the rule runs from the shipped file alone.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    run_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(fake),
        "FAKE_VERL_RAN": str(verl_ran or tmp_path / "verl-ran"),
        **({"FAKE_VERL_SAVES": str(saves)} if saves is not None else {}),
    }
    return subprocess.run(
        ["bash", "-c", command], env=run_env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def _resumed_at(env: Environment, step: int, identity: str | None = None) -> None:
    """A checkpoint directory an earlier run of `identity` (default: this experiment) left at `step`."""
    directory = Path(env.job.checkpoint.dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CHECKPOINT_TRACKER).write_text(str(step))
    (directory / IDENTITY_FILE).write_text(identity if identity is not None else training.identity_json(env))


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_every_shipped_stack_fails_a_resumed_run_that_did_not_train(tmp_path: Path, stack: str) -> None:
    """The rule runs in every shipped image (none needs grpo-infra): the head mounts its ConfigMap."""
    env = _stack(stack, tmp_path / "checkpoints")
    _resumed_at(env, 40)
    run = _run(tmp_path, env)
    assert run.returncode == 1, run
    assert run.stderr.strip().splitlines() == [
        "grpo: ERROR: the run resumed at step 40 and exited 0 without saving a newer step (now 40): it did not train"
    ]
    assert "WARNING" not in ray_job(env)["spec"]["entrypoint"]
    head = ray_job(env)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    volume = next(v for v in head["volumes"] if v["name"] == RESUME_VOLUME)
    assert volume["configMap"]["name"] == resume_config_map_name(env)
    assert {"name": RESUME_VOLUME, "mountPath": RESUME_MOUNT, "readOnly": True} in head["containers"][0]["volumeMounts"]


def test_the_same_experiment_resumes_and_advances(tmp_path: Path) -> None:
    env = _stack("eks-prod", tmp_path / "checkpoints")
    _resumed_at(env, 40)
    run = _run(tmp_path, env, saves=60)
    assert run.returncode == 0, run
    assert run.stderr == ""


def test_a_retry_after_the_experiment_finished_succeeds_and_a_run_that_died_after_saving_does_not(
    tmp_path: Path,
) -> None:
    """A RayJob attempt whose driver trained to the end and exited 0, failed afterwards (its submitter lost the
    head), is retried: the retry resumes at the last step and has nothing to train. It succeeds, as the
    experiment did; a checkpoint whose run never exited 0 is judged as before."""
    env = _stack("eks-prod", tmp_path / "checkpoints")
    assert _run(tmp_path, env, saves=40).returncode == 0  # trained to step 40 and exited 0
    retry = _run(tmp_path, env)
    assert retry.returncode == 0, retry
    assert retry.stderr.splitlines() == [
        "grpo: the experiment finished at step 40 in an earlier run; nothing was left to train"
    ]
    other = _stack("eks-prod", tmp_path / "other")
    _resumed_at(other, 40)  # step 40 saved, and the run died before exiting
    assert _run(tmp_path, other).returncode == 1


def test_a_fresh_run_records_its_experiment_and_is_not_judged(tmp_path: Path) -> None:
    env = _stack("eks-prod", tmp_path / "checkpoints")
    assert _run(tmp_path, env).returncode == 0
    recorded = json.loads((tmp_path / "checkpoints" / IDENTITY_FILE).read_text())
    assert recorded == training.experiment_identity(env)


def test_another_experiment_under_the_same_job_name_is_refused_in_one_line_before_verl(tmp_path: Path) -> None:
    first = _stack("eks-prod", tmp_path / "checkpoints")
    assert _run(tmp_path, first, saves=20).returncode == 0  # the first experiment trains and saves step 20
    second = _stack("eks-prod", tmp_path / "checkpoints", learning_rate=3e-6)
    assert second.job.name == first.job.name
    ran = tmp_path / "second-verl-ran"
    run = _run(tmp_path, second, saves=40, verl_ran=ran)
    assert run.returncode == 2, run
    old, new = (training.experiment_identity(e)["digest"] for e in (first, second))
    assert run.stderr.splitlines() == [
        f"grpo: ERROR: checkpoint dir {tmp_path / 'checkpoints'} belongs to experiment {old} (job {first.job.name}), "
        f"not this run's {new} (actor_rollout_ref.actor.optim.lr: {first.job.learning_rate} → 3e-06); "
        "set a new job.name for a new experiment, or remove the directory to start this one over"
    ]
    assert not ran.exists()
    assert (tmp_path / "checkpoints" / CHECKPOINT_TRACKER).read_text() == "20"


def test_a_job_submitted_to_a_running_cluster_is_judged_by_its_own_experiment(tmp_path: Path) -> None:
    """`grpo-infra submit` sends its experiment's identity inline: the cluster's ConfigMap holds the one the
    cluster was created for, which a changed stack no longer is."""
    first = _stack("eks-prod", tmp_path / "checkpoints")
    assert _run(tmp_path, first, saves=20, cluster=first).returncode == 0
    assert _run(tmp_path, first, saves=40, cluster=first).returncode == 0  # the same experiment resumes
    second = _stack("eks-prod", tmp_path / "checkpoints", learning_rate=3e-6)
    run = _run(tmp_path, second, saves=60, cluster=first)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run
    assert "belongs to experiment" in run.stderr and "actor_rollout_ref.actor.optim.lr" in run.stderr


def test_checkpoints_of_an_unknown_experiment_are_refused(tmp_path: Path) -> None:
    """A directory with verl's tracker and no identity: whose checkpoints they are cannot be told."""
    env = _stack("eks-prod", tmp_path / "checkpoints")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / CHECKPOINT_TRACKER).write_text("40")
    run = _run(tmp_path, env, saves=60)
    assert run.returncode == 2, run
    assert run.stderr.splitlines() == [
        f"grpo: ERROR: checkpoint dir {tmp_path / 'checkpoints'} holds checkpoints (step 40) of an unknown "
        f"experiment (no {IDENTITY_FILE}); set a new job.name for a new experiment, or remove the directory "
        "to start this one over"
    ]


def test_the_rule_reads_the_directory_verl_writes(tmp_path: Path) -> None:
    """The rule's --checkpoint-dir is verl's trainer.default_local_dir: the mount of the job's own subPath."""
    env = _stack("eks-prod", tmp_path)
    entrypoint = ray_job(env)["spec"]["entrypoint"]
    step = training_step(entrypoint).split()
    assert step[:2] == ["python3", f"{RESUME_MOUNT}/{RESUME_FILE}"]
    directory = step[step.index("--checkpoint-dir") + 1]
    overrides = dict(a.split("=", 1) for a in verl_argv(entrypoint)[3:])
    assert directory == overrides["trainer.default_local_dir"] == env.job.checkpoint.dir
    head = ray_job(env)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    mount = next(m for m in head["volumeMounts"] if m["name"] == "checkpoints")
    assert mount["mountPath"] == directory and mount["subPath"] == env.job.name


def test_a_run_resuming_at_the_experiments_last_step_succeeds_though_no_run_recorded_it_finished(tmp_path) -> None:
    """The race the test command once hit: the retry after a lost node saved step 10 of 10, and the gang was
    evicted before the driver exited 0 (no finished record). The next run resumes at 10 with nothing left to
    train: it succeeds when the identity knows the last step, and is still judged when it does not."""
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10\n")
    identity = json.dumps({"digest": "d", "job": "j", "fields": {}, "last_step": 10})
    (tmp_path / IDENTITY_FILE).write_text(identity)  # recorded by the experiment's first run
    assert resume.main(["--checkpoint-dir", str(tmp_path), "--identity", identity, "--", "true"]) == 0
    assert resume.verdict(10, 10, 0, None, 10)[0] == 0
    assert resume.verdict(10, 10, 0, None, 12)[0] == 1  # more steps were asked for: it should have trained
    assert resume.verdict(10, 10, 0, None, None)[0] == 1  # the last step unknown (verl derives it): judged
    # The sbatch's --judge reads the last step from the recorded identity.
    assert resume.main(["--checkpoint-dir", str(tmp_path), "--judge", "10"]) == 0


def test_the_probe_stacks_identity_names_its_last_step_and_verls_only_when_the_stack_fixes_it() -> None:
    assert training.experiment_identity(load_stack("local-k8s", ROOT).environment)["last_step"] == 3
    assert training.experiment_identity(load_stack("eks-prod", ROOT).environment)["last_step"] is None
