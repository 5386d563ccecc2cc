"""The Kubernetes rules reach `check`: each finding names its rule and the spec field to change."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from grpo_infra.check import kubernetes_rules, violations
from grpo_infra.k8s import objects
from grpo_infra.spec import load_stack
from tests.conftest import ROOT


def _with_rayjob_change(monkeypatch: pytest.MonkeyPatch, change: Any) -> list[dict[str, Any]]:
    """What `check` finds when the rendered RayJob is changed by `change` (a renderer regression)."""
    env = load_stack("onprem-k8s", ROOT).environment

    def rendered(e: Any) -> list[dict[str, Any]]:
        out = copy.deepcopy(objects(e))
        change(next(o for o in out if o["kind"] == "RayJob"))
        return out

    monkeypatch.setattr(kubernetes_rules, "objects", rendered)
    return [v.__dict__ for v in violations(env)]


@pytest.mark.parametrize(
    "change",
    [
        lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"].update(serviceType="LoadBalancer"),
        lambda j: j["spec"].update(shutdownAfterJobFinishes=False),
        lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(groupName="submitter"),
    ],
    ids=["public-head", "no-shutdown", "reserved-group"],
)
def test_a_rayjob_the_webhooks_would_refuse_is_a_kuberay_webhook_violation(
    monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    found = _with_rayjob_change(monkeypatch, change)
    assert found and {(v["rule"], v["where"]) for v in found} == {
        ("kuberay-webhook", "grpo-infra:environment.job.name")
    }


def test_the_shipped_rayjob_passes_the_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _with_rayjob_change(monkeypatch, lambda j: None) == []


def test_an_untainted_pool_is_refused_because_other_pods_can_take_its_nodes() -> None:
    """docs/check.md: real Kueue admits such a gang (a later scan sends the head to its own flavor;
    tests/kube/test_admission_model.py), but nothing keeps the head, the submitter or other pods off
    the GPU nodes, and each worker needs a whole node."""
    from tests.k8s.conftest import variant

    def untaint(raw: dict[str, Any]) -> None:
        for pool in raw["pools"]:
            pool.pop("taints", None)

    found = violations(variant("onprem-k8s", untaint))
    assert [(v.rule, v.where) for v in found] == [("gpu-pool-taint", "grpo-infra:environment.pools[0].taints")], found
    assert "no NoSchedule taint" in found[0].message


def test_a_noexecute_taint_keeps_other_pods_off_as_well() -> None:
    from tests.k8s.conftest import variant

    def no_execute(raw: dict[str, Any]) -> None:
        for pool in raw["pools"]:
            for taint in pool.get("taints", []):
                taint["effect"] = "NoExecute"

    assert violations(variant("onprem-k8s", no_execute)) == []
