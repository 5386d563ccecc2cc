"""Node-loss drills (grpo_infra/rehearsal/node_drills.py): what a drill changes in the rehearsal, and the verdict
it gives from what it saw. The drills themselves run on real nodes: `grpo-infra rehearse STACK --drill
worker-node|head-node` (benchmarks/drills_bench.py), and local-k8s's losses in tests/kube/test_job_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.rehearsal import node_drills
from grpo_infra.rehearsal.plan import rehearsal
from grpo_infra.spec import load_stack
from tests.conftest import ROOT


@pytest.mark.parametrize("stack", ["eks-prod", "gke-disagg"])
def test_a_node_drill_runs_the_probe_long_enough_to_lose_a_node_mid_run_and_says_so(stack: str) -> None:
    planned = rehearsal(stack, load_stack(stack, ROOT).environment)
    drilled = node_drills.with_long_probe(planned)
    probe = drilled.env.job.probe
    assert probe is not None and (probe.steps, probe.step_seconds) == (10, 6)
    # Losing the node at step 2 leaves most of the run to resume.
    assert probe.steps // 2 > node_drills.KILL_AT_STEP
    (entrypoint,) = [s for s in drilled.substitutions if s.what == "entrypoint"]
    assert "10 checkpointed steps of 6 s" in entrypoint.rehearsal
    # Nothing else of the rehearsal changes.
    assert drilled.env.model_copy(update={"job": planned.env.job}) == planned.env
    assert len(drilled.substitutions) == len(planned.substitutions)


def test_the_lost_gpu_node_stands_in_for_the_clouds_replacement_with_the_stacks_own_time() -> None:
    env = load_stack("eks-prod", ROOT).environment
    assert env.kubernetes is not None
    sub = node_drills.substitution("worker-node", env)
    assert f"nodeReplacementMinutes ({env.kubernetes.node_replacement_minutes} min)" in sub.stack
    assert f"after {node_drills.REPLACED_AFTER_S} s" in sub.rehearsal


def test_the_tracker_is_the_jobs_own_checkpoint_directory_on_the_shared_path() -> None:
    env = rehearsal("gke-dev", load_stack("gke-dev", ROOT).environment).env
    path = node_drills.tracker(env, Path("/var/lib/grpo-rehearsal/checkpoints"))
    assert path == Path("/var/lib/grpo-rehearsal/checkpoints") / env.job.name / "latest_checkpointed_iteration.txt"


def lost(**kw: object) -> node_drills.Loss:
    base = {"drill": "worker-node", "node": "h100-efa-1", "step": 2, "new_cluster_s": 95.0, "resumed_s": 140.0}
    return node_drills.Loss(**{**base, **kw, "resumed_step": 3})  # type: ignore[arg-type]


SUCCEEDED_AFTER_A_FAILURE = {"status": {"jobStatus": "SUCCEEDED", "failed": 1}}


def test_a_drill_passes_when_the_job_succeeded_after_a_failed_attempt_resumed_from_the_lost_step() -> None:
    assert node_drills.passed(lost(), SUCCEEDED_AFTER_A_FAILURE, resumed_from=2) is None
    line = lost().line("eks-prod")
    assert "h100-efa-1 lost at step 2; a new Ray cluster after 95s" in line
    assert line.endswith("the gang's GPUs idle 140s")


@pytest.mark.parametrize(
    ("loss", "job", "resumed_from", "why"),
    [
        (lost(), {"status": {"jobStatus": "SUCCEEDED"}}, 2, "no attempt failed: the loss went unnoticed"),
        (lost(), {"status": {"jobStatus": "FAILED", "failed": 3}}, 2, "the job ended FAILED, not SUCCEEDED"),
        (lost(), SUCCEEDED_AFTER_A_FAILURE, 0, "resumed from step 0, not from the step the node died at (2)"),
        (lost(), SUCCEEDED_AFTER_A_FAILURE, None, "resumed from step None"),
        (lost(error="a new Ray cluster after the loss: not within 900s"), SUCCEEDED_AFTER_A_FAILURE, 2, "not within"),
    ],
)
def test_a_drill_fails_naming_what_went_wrong(
    loss: node_drills.Loss, job: dict, resumed_from: int | None, why: str
) -> None:
    said = node_drills.passed(loss, job, resumed_from)
    assert said is not None and why in said
