"""Node-loss drills: a node of the running gang dies like a machine, to see how long its GPUs sit idle.

NCCL cannot take a replacement rank, so a lost node ends the whole attempt (`kubernetes.rayJob.nodeLoss`,
docs/kubernetes.md "When a node is lost"): Ray's GCS declares the node dead after `detectSeconds` (a lost
head: the submitter's liveness probe after the same window), the attempt fails, KubeRay starts a new Ray
cluster, and that cluster resumes from the last checkpoint once every pod has a node. Until the new attempt
checkpoints a step, every GPU of the gang trains nothing: that is what a drill measures, with the stack's
own timeouts, on the rehearsal's real nodes.

- `worker-node`: a GPU node of the gang dies at step `KILL_AT_STEP` and comes back `REPLACED_AFTER_S`
  later (the same node booted again, standing in for the cloud's replacement, whose time the stack
  declares as `nodeReplacementMinutes`: a rehearsal keeps every pool's nodes, so the new gang needs it back).
- `head-node`: the head's CPU node dies and stays dead; the new head runs on another CPU node.

The probe runs longer in a drill (`PROBE`) so that the loss falls mid-run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..job_wait import Kubectl, Say
from ..k8s.operators import KUBERAY_NAMESPACE, KUEUE_NAMESPACE
from ..kube import cluster, realnodes
from ..probe import LATEST
from ..spec import Environment
from .plan import Rehearsal, Substitution

KILL_AT_STEP = 2
REPLACED_AFTER_S = 60
PROBE = {"steps": 10, "stepSeconds": 6}
# How long each wait of the drill may take before it is named as the drill's failure.
WAIT_S = 900
JOIN_S = 120
NODE_DRILLS = {
    "worker-node": f"a GPU node of the running gang dies like a machine at step {KILL_AT_STEP} and boots again "
    f"{REPLACED_AFTER_S} s later (the cloud's replacement)",
    "head-node": f"the head's CPU node dies like a machine at step {KILL_AT_STEP} and stays dead",
}
ROLE = {"worker-node": "worker", "head-node": "head"}


def with_long_probe(planned: Rehearsal) -> Rehearsal:
    """The rehearsal with the probe's run long enough to lose a node mid-run (`PROBE`), said as a substitution."""
    data = planned.env.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["job"]["probe"] = dict(PROBE)
    line = f"the probe, {PROBE['steps']} checkpointed steps of {PROBE['stepSeconds']} s (a node drill's run)"
    subs = tuple(replace(s, rehearsal=line) if s.what == "entrypoint" else s for s in planned.substitutions)
    return Rehearsal(planned.stack, Environment.model_validate(data), subs)


@dataclass
class Loss:
    """What the drill did and saw, in seconds after the node died."""

    drill: str
    node: str = ""
    step: int = 0
    new_cluster_s: float | None = None
    resumed_s: float | None = None
    resumed_step: int | None = None
    error: str | None = None

    def line(self, stack: str) -> str:
        if self.error:
            return f"drill {self.drill} of {stack}: {self.error}"
        return (
            f"drill {self.drill} of {stack}: {self.node} lost at step {self.step}; a new Ray cluster after "
            f"{_seconds(self.new_cluster_s)}; training resumed (step {self.resumed_step} checkpointed by the new "
            f"attempt) {_seconds(self.resumed_s)} after the loss: the gang's GPUs idle {_seconds(self.resumed_s)}"
        )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}s"


def tracker(env: Environment, checkpoints: Path) -> Path:
    """verl's tracker file of the job's checkpoint directory on the rehearsal's shared host path."""
    from ..k8s.raycluster import checkpoint_sub_path

    return checkpoints / checkpoint_sub_path(env) / LATEST


def _step(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    limit = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > limit:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(1)
    return found


class NodeLossDrill:
    """Started once the RayJob runs (`job_wait.wait`'s `once_running`), in a thread of its own, so the run is
    followed as `up --wait` follows it while the drill kills and boots its node."""

    def __init__(self, drill: str, env: Environment, admin: Kubectl, checkpoints: Path, say: Say) -> None:
        self.loss = Loss(drill)
        self._env, self._admin, self._say = env, admin, say
        self._tracker = tracker(env, checkpoints)
        self._thread: threading.Thread | None = None

    def start(self, ray_cluster: str) -> None:
        self._thread = threading.Thread(target=self._run, args=(ray_cluster,), daemon=True)
        self._thread.start()

    def finish(self) -> Loss:
        """The drill's account, once the run has ended. A node still dead is booted again: its pods stay
        Terminating until a kubelet answers for them, and `destroy` would wait for ever on their namespace."""
        if self._thread is not None:
            # The new attempt's first step comes before its end: the drill has seen it by now, or never will.
            self._thread.join(timeout=JOIN_S)
            if self._thread.is_alive() and not self.loss.error:
                self.loss.error = (
                    "the run ended while the drill still waited for a new Ray cluster or a step after the loss"
                )
        elif not self.loss.error:
            self.loss.error = "the job never ran, so no node was lost"
        if self.loss.node and not realnodes.node_pids(self.loss.node):
            cluster.boot_node(self.loss.node)
            self._say(f"drill {self.loss.drill}: {self.loss.node} booted again, the run over")
        return self.loss

    def _run(self, first: str) -> None:
        try:
            self._lose(first)
        except Exception as exc:  # the drill's account says it; the run is followed to its end regardless
            self.loss.error = str(exc)

    def _lose(self, first: str) -> None:
        loss, ns = self.loss, self._env.job.tenant
        _until(lambda: _step(self._tracker) >= KILL_AT_STEP, f"step {KILL_AT_STEP} checkpointed")
        pods = json.loads(self._admin("get", "pods", "-n", ns, "-l", f"ray.io/cluster={first}", "-o", "json"))
        role = ROLE[loss.drill]
        nodes = sorted(
            p["spec"]["nodeName"] for p in pods["items"] if p["metadata"]["labels"].get("ray.io/node-type") == role
        )
        if not nodes:
            raise RuntimeError(f"no {role} pod of Ray cluster {first} on a node")
        loss.node, loss.step = nodes[0], _step(self._tracker)
        operators = self._operators_on(loss.node)
        lost = time.monotonic()
        cluster.kill_node(loss.node)
        self._say(
            f"drill {loss.drill}: {loss.node} ({role} of {first}) killed at step {loss.step}; operator pods on it: "
            + (", ".join(operators) or "none")
        )
        if loss.drill == "worker-node":
            time.sleep(REPLACED_AFTER_S)
            cluster.boot_node(loss.node)
            self._say(f"drill {loss.drill}: {loss.node} booted again {time.monotonic() - lost:.0f}s after the loss")

        def new_cluster() -> str:
            job = json.loads(self._admin("get", "rayjob", self._env.job.name, "-n", ns, "-o", "json"))
            name = job.get("status", {}).get("rayClusterName") or ""
            return name if name and name != first else ""

        _until(new_cluster, "a new Ray cluster after the loss")
        loss.new_cluster_s = time.monotonic() - lost
        before = _step(self._tracker)
        loss.resumed_step = _until(lambda: (s := _step(self._tracker)) > before and s, "a step of the new attempt")
        loss.resumed_s = time.monotonic() - lost

    def _operators_on(self, node: str) -> list[str]:
        """The operators' pods the loss takes down with the node: every retry after it waits until they run
        again elsewhere (docs/kubernetes.md, "When the head is lost"), so a drill names them."""
        pods = json.loads(self._admin("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "json"))
        return sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in pods["items"]
            if p["metadata"]["namespace"] in (KUBERAY_NAMESPACE, KUEUE_NAMESPACE)
        )


def passed(loss: Loss, outcome_job: dict[str, Any], resumed_from: int | None) -> str | None:
    """Why the drill failed (None when it passed): the job ended SUCCEEDED after at least one failed attempt,
    and the attempt after the loss resumed from a checkpoint no older than the step the node died at."""
    status = outcome_job.get("status", {})
    if loss.error:
        return loss.error
    if status.get("jobStatus") != "SUCCEEDED":
        return f"the job ended {status.get('jobStatus') or status.get('jobDeploymentStatus')}, not SUCCEEDED"
    if not status.get("failed"):
        return "no attempt failed: the loss went unnoticed"
    if resumed_from is None or resumed_from < loss.step:
        return f"the new attempt resumed from step {resumed_from}, not from the step the node died at ({loss.step})"
    return None


def substitution(drill: str, env: Environment) -> Substitution:
    """What the drill's node stands in for, printed with the other substitutions."""
    assert env.kubernetes is not None
    if drill == "worker-node":
        cloud = f"replaced by the cloud in nodeReplacementMinutes ({env.kubernetes.node_replacement_minutes} min)"
        return Substitution("lost GPU node", cloud, f"the same node booted again after {REPLACED_AFTER_S} s")
    return Substitution("lost head node", "another CPU node of the head pool", "another local CPU node")
