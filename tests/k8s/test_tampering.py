"""Break one thing a cluster would refuse, and the suite must notice: typos, quotas, tolerations."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grpo_infra.k8s import objects
from grpo_infra.validate import validate_objects

from .conftest import K8S_STACKS, env_of


def _stack(stack: str) -> list[dict[str, Any]]:
    return copy.deepcopy(objects(env_of(stack)))


def _one(rendered: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(o for o in rendered if o["kind"] == kind and (name is None or o["metadata"]["name"] == name))


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_untouched_stack_is_clean(stack: str) -> None:
    assert validate_objects(_stack(stack)) == []


def test_misspelled_field_in_a_queue_fails() -> None:
    rendered = _stack("onprem-k8s")
    queue = _one(rendered, "ClusterQueue", "grpo-rl-team")
    queue["spec"]["queueingStrategey"] = queue["spec"].pop("queueingStrategy")
    errors = validate_objects(rendered)
    assert any("'queueingStrategey' was unexpected" in e for e in errors), errors


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_gpu_quota_below_the_gang_fails(stack: str) -> None:
    rendered = _stack(stack)
    env = env_of(stack)
    queue = _one(rendered, "ClusterQueue", f"grpo-{env.job.tenant}")
    pool_flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]
    gpu = next(r for r in pool_flavor["resources"] if r["name"] == env.gang.pool.gpu.resource)
    gpu["nominalQuota"] = str(env.gang.world_size - 1)
    errors = validate_objects(rendered)
    assert any("fits no flavor" in e and "quota too small" in e for e in errors), errors


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_missing_toleration_for_a_pool_taint_fails(stack: str) -> None:
    rendered = _stack(stack)
    job = _one(rendered, "RayJob")
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["tolerations"] = worker["tolerations"][1:]
    errors = validate_objects(rendered)
    assert any("no toleration for taint" in e for e in errors), errors


def test_worker_selector_off_the_pool_fails() -> None:
    rendered = _stack("gke-dev")
    worker = _one(rendered, "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["nodeSelector"] = {"grpo-infra/pool": "elsewhere"}
    assert any("node labels do not match" in e for e in validate_objects(rendered))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: j["metadata"].update(name="g" * 48), "at most 47 characters"),
        (lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(groupName="head"), "reserved"),
        (
            lambda j: j["spec"]["rayClusterSpec"].update(
                workerGroupSpecs=[
                    {**j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0], "groupName": f"g{i}"} for i in range(17)
                ]
            ),
            "at most 16",
        ),
        (lambda j: j["spec"].update(clusterSelector={"ray.io/cluster": "x"}), "clusterSelector"),
        (lambda j: j["spec"].update(shutdownAfterJobFinishes=False), "shutdownAfterJobFinishes"),
        (lambda j: j["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True), "must be false"),
        (lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(minReplicas=1), "must be equal"),
        (lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"].update(serviceType="LoadBalancer"), "ClusterIP"),
    ],
    ids=["name", "group-head", "17-groups", "cluster-selector", "no-shutdown", "autoscaling", "elastic", "public-head"],
)
def test_webhook_rules(change: Any, message: str) -> None:
    rendered = _stack("onprem-k8s")
    change(_one(rendered, "RayJob"))
    errors = validate_objects(rendered)
    assert any(message in e for e in errors), errors


def test_job_naming_a_missing_priority_class_fails() -> None:
    rendered = _stack("eks-prod")
    _one(rendered, "RayJob")["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    assert any("no such WorkloadPriorityClass" in e for e in validate_objects(rendered))
