"""Drills (grpo_infra/rehearsal/drills.py): each fault lands in the head pod of the stack's own Ray object and
nowhere else, and the drill's verdict reads the one line `up --wait` prints. On real nodes:
`grpo-infra rehearse STACK --drill DRILL` (benchmarks/drills_bench.py), and the image drill of local-k8s in
tests/kube/test_job_real.py."""

from __future__ import annotations

import copy

import pytest

from grpo_infra.k8s import objects as rendered
from grpo_infra.rehearsal import drills
from grpo_infra.spec import load_stack
from tests.conftest import ROOT


def ray_object(stack: str) -> dict:
    (ray,) = [o for o in rendered(load_stack(stack, ROOT).environment) if o["kind"] in ("RayJob", "RayCluster")]
    return ray


@pytest.mark.parametrize("stack", ["eks-prod", "gke-disagg"])
def test_the_head_init_drill_fails_the_heads_first_init_container_only(stack: str) -> None:
    ray = ray_object(stack)
    hit = drills.inject("head-init", copy.deepcopy(ray))
    head = hit["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    command = head["initContainers"][0]["command"]
    assert command[:2] == ["sh", "-c"] and command[2].endswith("exit 1") and "args" not in head["initContainers"][0]
    # The workers and the head's other containers are the stack's own.
    before = ray["spec"]["rayClusterSpec"]
    assert hit["spec"]["rayClusterSpec"]["workerGroupSpecs"] == before["workerGroupSpecs"]
    assert head["containers"] == before["headGroupSpec"]["template"]["spec"]["containers"]


def test_the_image_drill_renames_every_image_of_the_head_and_no_worker() -> None:
    ray = ray_object("gke-dev")
    hit = drills.inject("image", copy.deepcopy(ray))
    head = hit["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    images = [c["image"] for c in [*head["initContainers"], *head["containers"]]]
    assert images and all(i.endswith(f":{drills.MISSING_TAG}") for i in images)
    workers = hit["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert all(drills.MISSING_TAG not in c["image"] for w in workers for c in w["template"]["spec"]["containers"])


def test_objects_that_are_not_ray_objects_are_left_alone() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"}}
    assert drills.inject("image", copy.deepcopy(namespace)) == namespace


def test_the_verdict_reads_the_hold_and_the_release_from_the_one_line() -> None:
    line = (
        "rayjob dev/x: pod dev/x-head on grpo-cpu-0, init container image-guard: exited 1 (Error, 1 restart(s)): "
        "drill: FAIL ...; the gang's GPUs held 7s since Kueue admitted it; workload rayjob-x-1 deactivated, its GPUs "
        "released after 2s (after the fix: ...)"
    )
    assert drills.result(line) == drills.Result(7, 2) and drills.result(line).passed
    unreleased = (
        "rayjob dev/x: ...; the gang's GPUs held 7s since Kueue admitted it; workload w deactivated, Kueue still "
        "held its quota after 60s"
    )
    assert not drills.result(unreleased).passed


def test_an_unwatched_gang_is_held_once_per_admission_for_the_stacks_timeout() -> None:
    env = load_stack("eks-prod", ROOT).environment
    assert drills.unwatched_hold(env) == "45 min × 6 admissions = 4.5 h"
