"""The admission model agrees with Kueue v0.19.2 on hand-built objects, rule by rule.

Each expectation below is a fact read from Kueue's source at v0.19.2 (cited per test), not from the
model: flavor matching and taints in pkg/scheduler/flavorassigner/flavorassigner.go
(checkFlavorForPodSets, flavorSelector), flavor order and quota in the same file (findFlavorForPodSets,
fitsResourceQuota), pod sets of a RayJob in pkg/controller/jobs/raycluster/common.go and
pkg/controller/jobs/rayjob/rayjob_controller.go, toleration matching in the vendored
k8s.io/api/core/v1/toleration.go.
"""

from __future__ import annotations

from typing import Any

from grpo_infra.validate.rules import admission_errors

GPU = "nvidia.com/gpu"


def _flavor(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {"nodeLabels": labels or {}, **spec}}


def _quota(flavor: str, cpu: str, gpu: str) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "1Ti", GPU: gpu}  # memory is ample: the submitter asks for some
    return {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in resources.items()]}


def _queues(*flavor_quotas: dict[str, Any]) -> list[dict[str, Any]]:
    cq = {
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": list(flavor_quotas)}]},
    }
    lq = {"kind": "LocalQueue", "metadata": {"name": "q", "namespace": "team"}, "spec": {"clusterQueue": "cq"}}
    return [cq, lq]


def _pod(cpu: str, gpu: str | None = None, **spec: Any) -> dict[str, Any]:
    requests = {"cpu": cpu, **({GPU: gpu} if gpu else {})}
    return {"spec": {"containers": [{"resources": {"requests": requests}}], **spec}}


def _job(head: dict[str, Any], worker: dict[str, Any], replicas: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "kind": "RayJob",
        "metadata": {"name": "j", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": head},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "numOfHosts": 1, "template": worker}],
            },
            **spec,
        },
    }


def _admits(objects: list[dict[str, Any]]) -> list[str]:
    return admission_errors(objects)


def test_a_pod_that_selects_nothing_may_use_a_labelled_flavor() -> None:
    """flavorSelector keeps only the flavor's label keys the pod selects; Kueue then copies the flavor's
    labels into the pod (pkg/podset/podset.go FromAssignment, line 87). Selecting nothing matches."""
    objects = [_flavor("gpus", {"pool": "a100"}), *_queues(_quota("gpus", "100", "16"))]
    worker = _pod("10", "8", nodeSelector={"pool": "a100"})
    assert (
        _admits(
            [
                *objects,
                _job(_pod("1"), worker),
            ]
        )
        == []
    )


def test_a_selector_key_the_flavor_does_not_label_is_ignored() -> None:
    """flavorSelector (flavorassigner.go lines 1278-1292): keys outside the flavor's nodeLabels are dropped."""
    objects = [_flavor("gpus", {"pool": "a100"}), *_queues(_quota("gpus", "100", "16"))]
    worker = _pod("10", "8", nodeSelector={"pool": "a100", "zone": "b"})
    assert _admits([*objects, _job(_pod("1"), worker)]) == []


def test_a_selector_value_the_flavor_contradicts_is_refused() -> None:
    objects = [_flavor("gpus", {"pool": "a100"}), *_queues(_quota("gpus", "100", "16"))]
    worker = _pod("10", "8", nodeSelector={"pool": "h100"})
    errors = _admits([*objects, _job(_pod("1"), worker)])
    assert len(errors) == 1 and "pod set gpu (2 pods) fits no flavor" in errors[0], errors
    assert "node labels do not match" in errors[0]


def test_an_untainted_gpu_flavor_listed_first_starves_the_workers_only_for_the_first_scan() -> None:
    """Kueue walks the flavors in order and stops at the first that fits (findFlavorForPodSets); pod sets
    are assigned in order, head first (BuildPodSets), each adding to what the earlier ones took
    (fitsResourceQuota). The first scan puts the head on the GPU flavor, whose CPU quota was sized for the
    workers alone; the next cycle resumes the head's scan at the following flavor
    (NextFlavorToTryForPodSetResource), and the gang is admitted. Real Kueue does this (the local
    cluster's `pool without taints` case in tests/kube/test_admission_model.py)."""
    objects = [
        _flavor("gpus", {"pool": "a100"}),
        _flavor("ray-head"),
        *_queues(_quota("gpus", "20", "16"), _quota("ray-head", "4", "0")),
    ]
    worker = _pod("10", "8", nodeSelector={"pool": "a100"})
    assert _admits([*objects, _job(_pod("2"), worker)]) == []


def test_when_no_combination_fits_the_first_scans_reasons_are_given() -> None:
    """The head fits nowhere but the GPU flavor (ray-head's CPU quota is 1), where the workers then do
    not fit: no cycle can admit it, and the reasons are those the Workload shows first."""
    objects = [
        _flavor("gpus", {"pool": "a100"}),
        _flavor("ray-head"),
        *_queues(_quota("gpus", "20", "16"), _quota("ray-head", "1", "0")),
    ]
    worker = _pod("10", "8", nodeSelector={"pool": "a100"})
    errors = _admits([*objects, _job(_pod("2"), worker)])
    assert len(errors) == 1, errors
    assert "pod set gpu (2 pods) fits no flavor of cq" in errors[0]
    assert "cpu 22 > 20, after pod sets head" in errors[0]


def test_a_taint_on_the_gpu_flavor_sends_the_head_to_the_next_one() -> None:
    """checkFlavorForPodSets (line 1239): a NoSchedule taint the pod does not tolerate skips the flavor."""
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    objects = [
        _flavor("gpus", {"pool": "a100"}, nodeTaints=[taint]),
        _flavor("ray-head"),
        *_queues(_quota("gpus", "20", "16"), _quota("ray-head", "4", "0")),
    ]
    toleration = {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
    worker = _pod("10", "8", nodeSelector={"pool": "a100"}, tolerations=[toleration])
    assert _admits([*objects, _job(_pod("2"), worker)]) == []


def test_the_flavors_own_tolerations_count() -> None:
    """Line 1239 appends the flavor's spec.tolerations to the pod's before matching taints."""
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    flavor = _flavor("gpus", {}, nodeTaints=[taint], tolerations=[{"key": "gpu", "operator": "Exists"}])
    objects = [flavor, *_queues(_quota("gpus", "100", "16"))]
    assert _admits([*objects, _job(_pod("1"), _pod("10", "8"))]) == []


def test_toleration_matching_follows_the_api() -> None:
    """toleration.go ToleratesTaint (lines 52-77): an empty effect or key matches any; Equal compares the
    value ('' when unset); Exists ignores it; a PreferNoSchedule taint never blocks (line 1240)."""
    cases = [
        ({"operator": "Exists"}, {"key": "gpu", "value": "yes", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, {"key": "gpu", "effect": "NoSchedule"}, False),
        ({"key": "gpu"}, {"key": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "gpu"}, {"key": "gpu", "value": "yes", "effect": "NoSchedule"}, False),
        ({"key": "other", "operator": "Exists"}, {"key": "gpu", "effect": "NoSchedule"}, False),
        ({"key": "gpu", "operator": "Gt", "value": "3"}, {"key": "gpu", "value": "5", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "operator": "Lt", "value": "3"}, {"key": "gpu", "value": "5", "effect": "NoSchedule"}, False),
        ({}, {"key": "gpu", "value": "yes", "effect": "PreferNoSchedule"}, True),
    ]
    for toleration, taint, admitted in cases:
        objects = [_flavor("gpus", {}, nodeTaints=[taint]), *_queues(_quota("gpus", "100", "16"))]
        worker = _pod("10", "8", tolerations=[toleration] if toleration else [])
        head = _pod("1", tolerations=[{"operator": "Exists"}])
        errors = _admits([*objects, _job(head, worker, submissionMode="HTTPMode")])
        assert (errors == []) is admitted, (toleration, taint, errors)


def test_worker_pods_count_replicas_times_hosts() -> None:
    """effectiveWorkerCount (raycluster/common.go lines 64-73): replicas × numOfHosts."""
    objects = [_flavor("gpus"), *_queues(_quota("gpus", "100", "16"))]
    job = _job(_pod("1"), _pod("10", "8"), replicas=1)
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["numOfHosts"] = 3
    errors = _admits([*objects, job])
    assert len(errors) == 1 and "pod set gpu (3 pods)" in errors[0] and f"{GPU} 24 > 16" in errors[0], errors


def test_a_k8s_job_mode_rayjob_without_a_submitter_template_still_counts_one() -> None:
    """addSubmitterPodSet and defaultSubmitterResources (rayjob_controller.go lines 252-311): one
    submitter pod requesting 500m CPU, even when the RayJob brings no template."""
    objects = [_flavor("gpus"), *_queues(_quota("gpus", "21.5", "16"))]
    assert _admits([*objects, _job(_pod("1"), _pod("10", "8"))]) == []  # head 1 + workers 20 + submitter 0.5
    objects = [_flavor("gpus"), *_queues(_quota("gpus", "21.4", "16"))]
    errors = _admits([*objects, _job(_pod("1"), _pod("10", "8"))])
    assert len(errors) == 1 and "pod set submitter (1 pods)" in errors[0], errors
    assert _admits([*objects, _job(_pod("1"), _pod("10", "8"), submissionMode="HTTPMode")]) == [], (
        "no submitter pod set outside K8sJobMode"
    )
