"""Drills: a rehearsal with one fault put into the stack's own Ray object, to see what the fault costs.

A fault that stops a gang before it runs holds every GPU Kueue admitted it with. The rehearsal follows the
run as `grpo-infra up --wait` does (grpo_infra/job_wait.py): the drill passes when the cause reaches the user
in one line and the gang's GPUs are released (its Workload deactivated, Kueue's quota freed), and says how
long they were held. Without anything watching, Kueue holds them until waitForPodsReady's timeout, then
again after each requeue: `unwatched_hold` says how long that is for the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..k8s.kueue_config import REQUEUE_LIMIT
from ..spec import Environment

MISSING_TAG = "drill-no-such-tag"
DRILLS = {
    "head-init": "the head pod's first init container exits 1",
    "image": f"the head pod's image reference names a tag no registry has (`:{MISSING_TAG}`)",
}


def _head_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The head pod template's spec of a RayJob, RayCluster or RayCronJob (None for another object)."""
    spec = obj.get("spec", {})
    kind = obj.get("kind")
    cluster = (
        spec.get("rayClusterSpec")
        if kind == "RayJob"
        else spec
        if kind == "RayCluster"
        else spec.get("jobTemplate", {}).get("rayClusterSpec")
        if kind == "RayCronJob"
        else None
    )
    return cluster["headGroupSpec"]["template"]["spec"] if cluster else None


def inject(drill: str, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the drill's fault in its head pod (unchanged when it is not a Ray object)."""
    head = _head_spec(obj)
    if head is None:
        return obj
    if drill == "head-init":
        first = head["initContainers"][0]
        first["command"] = ["sh", "-c", 'echo "drill: FAIL $0" >&2; exit 1', DRILLS[drill]]
        first.pop("args", None)
    elif drill == "image":
        for container in [*head.get("initContainers", []), *head["containers"]]:
            container["image"] = container["image"].rsplit(":", 1)[0] + f":{MISSING_TAG}"
    else:
        raise ValueError(f"no drill {drill!r}; drills: {', '.join(DRILLS)}")
    return obj


@dataclass(frozen=True)
class Result:
    """What the drill's one line says: how long Kueue had held the gang when the cause was shown, and how
    long after that its GPUs were released (None when they were not)."""

    held_s: int | None
    released_s: int | None

    @property
    def passed(self) -> bool:
        return self.held_s is not None and self.released_s is not None


def result(line: str) -> Result:
    held = re.search(r"the gang's GPUs held (\d+)s", line)
    released = re.search(r"its GPUs released after (\d+)s", line)
    return Result(int(held[1]) if held else None, int(released[1]) if released else None)


def unwatched_hold(env: Environment) -> str:
    """How long Kueue holds a gang that never becomes ready when nothing deactivates it: waitForPodsReady's
    timeout, once per admission (the first and each of `backoffLimitCount` requeues, grpo_infra/k8s/kueue_config.py)."""
    assert env.kubernetes is not None
    minutes = env.kubernetes.pods_ready_timeout_minutes
    admissions = 1 + REQUEUE_LIMIT
    return f"{minutes} min × {admissions} admissions = {minutes * admissions / 60:.1f} h"
