"""A gang that cannot go on is said in one line, not waited out: the pod, its container and why, as the API
server reports them (pod status as KubeRay's pods carry it on a real kubelet; the rehearsal of onprem-k8s in
docs/rehearsal.md shows the line on a real cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grpo_infra.job_wait import stuck

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
