"""The Kueue admission model of `grpo-infra check` (grpo_infra/validate/rules.py) against real Kueue:
for each case the model's verdict (admissible or not) must be what the local Kueue does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from grpo_infra.kube.plan import Paths
from grpo_infra.validate.rules import admission_errors

from .conftest import get, local_k8s, stack_objects, wait_until, with_changes
from .test_cluster import apply_stack, delete_stack

# On the session's local-k8s cluster with KWOK nodes (conftest.py `kube`).
pytestmark = pytest.mark.cluster("kwok")


def quota(gpus: int) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["tenants"][0]["gpuQuota"] = gpus

    return change


def untainted(data: dict[str, Any]) -> None:
    data["pools"][0]["taints"] = []


def as_shipped(data: dict[str, Any]) -> None:
    pass


def workers_without_selector(objects: list[dict[str, Any]]) -> None:
    """A RayJob written by hand without the pool's nodeSelector: Kueue still assigns the pool's flavor
    (it checks a flavor's labels only against what the pod does select), and adds the labels."""
    for obj in objects:
        if obj["kind"] == "RayJob":
            for group in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
                group["template"]["spec"].pop("nodeSelector", None)


CASES = {
    "as shipped": (as_shipped, None),
    "quota one node short": (quota(16), None),
    "quota exactly the gang": (quota(24), None),
    "pool without taints": (untainted, None),
    "workers without the pool's nodeSelector": (untainted, workers_without_selector),
}


# Seconds Kueue is given to admit: a scan that fails is followed by the next one, which resumes each
# pod set's flavor search where the last stopped (docs/check.md); on this cluster that takes seconds.
WINDOW = 30


def kueue_admits(paths: Paths, namespace: str) -> bool:
    """Kueue's verdict on the only Workload in the namespace: quota reserved within WINDOW seconds, or
    judged (QuotaReserved False) and still not reserved by then."""

    def reserved() -> str | None:
        items = get(paths, "workloads", "-n", namespace)["items"]
        for c in items[0].get("status", {}).get("conditions", []) if items else []:
            if c["type"] == "QuotaReserved":
                return c["status"]
        return None

    try:
        wait_until(lambda: reserved() == "True", WINDOW, "quota reserved")
        return True
    except AssertionError:
        assert reserved() == "False", "Kueue never judged the Workload"
        return False


@pytest.mark.parametrize("case", list(CASES))
def test_the_admission_model_agrees_with_kueue(kube: Paths, case: str) -> None:
    change, edit = CASES[case]
    env = with_changes(local_k8s(), change)
    objects = stack_objects(env)
    if edit is not None:
        edit(objects)
    model = not admission_errors(objects)
    apply_stack(kube, objects)
    try:
        assert kueue_admits(kube, env.job.tenant) == model, admission_errors(objects)
    finally:
        delete_stack(kube, objects)
