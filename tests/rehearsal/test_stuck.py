"""A gang that cannot go on is said in one line, not waited out: the pod, its container and why, as the API
server reports them (pod status as KubeRay's pods carry it on a real kubelet; the rehearsal of onprem-k8s in
docs/rehearsal.md shows the line on a real cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from grpo_infra import job_wait
from grpo_infra.job_wait import stuck
from grpo_infra.spec import load_stack
from tests.conftest import ROOT

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def pod(name: str, **status: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "grpo-gpu-1"}, "status": status}


def guard(**state: object) -> dict[str, object]:
    return {"name": "image-guard", "restartCount": 2, "state": state, "lastState": {}}


def test_a_failed_init_container_stops_the_wait_naming_the_pod_and_container() -> None:
    failed = guard(waiting={"reason": "CrashLoopBackOff"})
    failed["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    found = stuck([pod("head"), pod("worker-0", initContainerStatuses=[failed])], NOW, None)
    assert found is not None
    assert (found.pod, found.node, found.container, found.init) == ("worker-0", "grpo-gpu-1", "image-guard", True)
    assert found.reason == "exited 1 (Error, 2 restart(s))"


def test_a_running_or_passed_init_container_is_not_stuck() -> None:
    passed = guard(terminated={"exitCode": 0, "reason": "Completed"})
    running = guard(running={"startedAt": "2026-12-05T11:59:00Z"})
    assert stuck([pod("a", initContainerStatuses=[passed]), pod("b", initContainerStatuses=[running])], NOW, 60) is None


def test_an_image_that_cannot_be_pulled_is_stuck_in_every_container() -> None:
    waiting = {"name": "ray-worker", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
    found = stuck([pod("w", containerStatuses=[waiting])], NOW, None)
    assert found is not None and found.container == "ray-worker" and found.reason == "ImagePullBackOff: not found"


def test_an_unschedulable_pod_is_stuck_only_where_the_nodes_are_all_there_is_and_only_after_the_grace() -> None:
    message = "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s)."
    since = (NOW - timedelta(seconds=90)).isoformat().replace("+00:00", "Z")
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    pending = pod("head", conditions=[{**condition, "lastTransitionTime": since}])
    assert stuck([pending], NOW, None) is None  # a cloud's autoscaler may still add the node
    assert stuck([pending], NOW, 120) is None
    found = stuck([pending], NOW, 60)
    assert found is not None and found.container is None
    assert found.reason == f"Unschedulable for 90s: {message}"


# What a failed attempt leaves: the RayJob after KubeRay v1.6.2 counted it, and the submitter's log (`ray job
# submit` following the driver), as the rehearsal of gke-disagg saw them before its fix.
FAILED_JOB = {
    "metadata": {"name": "grpo-qwen25-3b-disagg"},
    "status": {"jobDeploymentStatus": "Running", "jobStatus": "FAILED", "failed": 1},
}
SUBMITTER_LOG = """\
PROBE {"event": "nodes", "count": 4}
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/grpo_infra/probe.py", line 226, in by_role
    ray.get(group.ready(), timeout=60)
ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.
2026-12-05 18:21:20,199	ERR cli.py:75 -- Job 'grpo-qwen25-3b-disagg-n4jgd' failed
"""


def test_a_rehearsal_stops_at_the_first_failed_attempt_with_the_drivers_error_line() -> None:
    asked: list[tuple[str, ...]] = []

    def kubectl(*args: str, check: bool = True) -> str:
        asked.append(args)
        return json.dumps(FAILED_JOB) if args[:2] == ("get", "rayjob") else SUBMITTER_LOG

    env = load_stack("gke-disagg", ROOT).environment
    with pytest.raises(job_wait.WaitError) as failed:
        job_wait.wait(env, kubectl, lambda _: None, timeout=5, poll=0, first_failure=True)
    assert str(failed.value) == (
        "rayjob dev/grpo-qwen25-3b-disagg: attempt 1 failed (a rehearsal does not retry): "
        "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready."
    )
    assert ("logs", "-n", "dev", "job/grpo-qwen25-3b-disagg", "--tail=200") in asked


def test_up_wait_lets_kuberay_retry_a_failed_attempt() -> None:
    """Outside a rehearsal a failed attempt is KubeRay's to retry (backoffLimit): the wait goes on."""
    env = load_stack("gke-disagg", ROOT).environment
    with pytest.raises(job_wait.WaitError, match="still Running / FAILED after 0s"):
        job_wait.wait(env, lambda *a, check=True: json.dumps(FAILED_JOB), lambda _: None, timeout=0.001, poll=0)


def test_when_the_submitters_log_is_gone_the_line_comes_from_kuberays_message() -> None:
    """KubeRay v1.6.2 keeps the driver's last logs in the RayJob's message; the rehearsal of gke-disagg read
    its FAIL line there when the submitter's pod had already gone (docs/rehearsal.md)."""
    job = {
        **FAILED_JOB,
        "status": {
            **FAILED_JOB["status"],
            "message": "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 "
            "chars):\nPROBE {}\nprobe: FAIL role trainer needs 2 node(s) of pool a3-h100 with 8 GPUs in Ray; Ray's "
            "nodes of that pool (address, GPUs): 10.244.1.2 0, 10.244.2.2 0\n",
        },
    }
    env = load_stack("gke-disagg", ROOT).environment

    def kubectl(*args: str, check: bool = True) -> str:
        return json.dumps(job) if args[:2] == ("get", "rayjob") else ""

    with pytest.raises(
        job_wait.WaitError,
        match=r"attempt 1 failed \(a rehearsal does not retry\): probe: FAIL role "
        r"trainer needs 2 node\(s\) of pool a3-h100 with 8 GPUs in Ray; .*: 10\.244\.1\.2 0, 10\.244\.2\.2 0$",
    ):
        job_wait.wait(env, kubectl, lambda _: None, timeout=5, poll=0, first_failure=True)


def starting(name: str, uid: str, phase: str = "Pending", node: str | None = "grpo-gpu-1") -> dict[str, object]:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def failed_mount(uid: str, first: datetime, kind: str = "Pod") -> dict[str, object]:
    """A FailedMount event as the kubelet records it (core/v1 Event, kubernetes v1.36.3)."""
    return {
        "reason": "FailedMount",
        "type": "Warning",
        "involvedObject": {"kind": kind, "name": "x", "uid": uid},
        "firstTimestamp": first.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lastTimestamp": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "count": 7,
        "message": 'MountVolume.SetUp failed for volume "models" : hostPath type check failed: '
        "/var/lib/grpo-models is not a directory",
    }


def test_a_volume_that_keeps_failing_to_mount_is_stuck_after_the_wait_with_the_kubelets_message() -> None:
    pods = [starting("head", "u-head", phase="Running"), starting("worker-0", "u-w0")]
    found = job_wait.stuck_mount(pods, [failed_mount("u-w0", NOW - timedelta(seconds=200))], NOW, 180)
    assert found is not None and (found.pod, found.container) == ("worker-0", None)
    assert found.reason == (
        'on grpo-gpu-1: FailedMount for 200s: MountVolume.SetUp failed for volume "models" : hostPath type check '
        "failed: /var/lib/grpo-models is not a directory"
    )


@pytest.mark.parametrize(
    ("pods", "event"),
    [
        # Within the wait: a slow attach may still mount.
        ([starting("w", "u")], failed_mount("u", NOW - timedelta(seconds=100))),
        # The pod has started since (an old event of a mount that then succeeded).
        ([starting("w", "u", phase="Running")], failed_mount("u", NOW - timedelta(seconds=600))),
        # Another pod's event (a finished gang's, another job's).
        ([starting("w", "u")], failed_mount("someone-else", NOW - timedelta(seconds=600))),
        # Not a pod's event.
        ([starting("w", "u")], failed_mount("u", NOW - timedelta(seconds=600), kind="Node")),
        # Not on a node yet: the scheduler's business, not the kubelet's.
        ([starting("w", "u", node=None)], failed_mount("u", NOW - timedelta(seconds=600))),
    ],
)
def test_a_mount_is_not_stuck_while_it_may_still_succeed_or_is_not_this_gangs(
    pods: list[dict[str, object]], event: dict[str, object]
) -> None:
    assert job_wait.stuck_mount(pods, [event], NOW, 180) is None
