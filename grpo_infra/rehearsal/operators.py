"""The operators as the stack's charts made them, and what `destroy` leaves of them.

A rehearsal installs Kueue and KubeRay from the stack's own charts (the bundled copies of the same versions),
as `pulumi up` does on a cloud. Once `up` returns, each operator must be a Ready pod of its chart, running the
image the chart names (loaded into the nodes, never pulled), and leaving a lost node after
`OPERATOR_NODE_LOSS_S` (the value the stack gives both charts: the head-node drill, docs/rehearsal.md), and
Kueue's visibility API must answer through the API server (the aggregation the chart registers). Once
`destroy` returns, nothing of the stack may be left but what Helm keeps by its own rule: a chart's `crds/`
folder is installed and never deleted (https://helm.sh/docs/chart_best_practices/custom_resource_definitions/),
which is KubeRay's CRDs at v1.6.2; Kueue's CRDs are templates of its chart and go with it.
"""

from __future__ import annotations

import json
import tarfile
import time
from typing import Any

import yaml

from ..job_wait import Kubectl, Say
from ..k8s.namespaces import tenant_namespaces
from ..k8s.operators import (
    KUBERAY_NAMESPACE,
    KUEUE_NAMESPACE,
    OPERATOR_NODE_LOSS_S,
    bundled_chart,
    kuberay_image,
    kueue_image,
    operator_tolerations,
)
from ..k8s.queues import cluster_queue_name
from ..kube.plan import KubeError
from ..spec import Environment
from ..validate.crds import BUNDLED

# The kinds of the charts' cluster-wide objects (their pods and releases go with their namespaces).
CLUSTER_KINDS = (
    "customresourcedefinitions",
    "clusterroles",
    "clusterrolebindings",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "apiservices",
)
RAY_KINDS = ("rayjobs", "rayclusters", "raycronjobs")
# Pulumi's destroy returns once the API server accepted each deletion; a namespace then empties itself.
GONE_WITHIN_S = 120


class OperatorError(Exception):
    """An operator not as its chart makes it, or something of the stack left after `destroy` (one line)."""


def images() -> dict[str, str]:
    """Each operator's namespace and the image its chart runs."""
    return {KUEUE_NAMESPACE: kueue_image(), KUBERAY_NAMESPACE: kuberay_image()}


def _items(kubectl: Kubectl, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(kubectl("get", *args, "-o", "json")).get("items", []))


def _lost_node_seconds(tolerations: list[dict[str, Any]], taints: set[str]) -> dict[str, Any]:
    """The seconds each of these NoExecute taints is tolerated for."""
    return {
        t.get("key"): t.get("tolerationSeconds")
        for t in tolerations
        if t.get("effect") == "NoExecute" and t.get("key") in taints
    }


def pod_line(namespace: str, image: str, pods: list[dict[str, Any]]) -> str:
    """The operator's one pod as the chart must make it, in one line; raises OperatorError naming what differs."""
    if len(pods) != 1:
        raise OperatorError(f"operator {namespace}: {len(pods)} pods, its chart runs one")
    [pod] = pods
    name = f"{namespace}/{pod['metadata']['name']}"
    statuses = pod.get("status", {}).get("containerStatuses") or []
    if not statuses or not all(s.get("ready") for s in statuses):
        raise OperatorError(f"operator {name}: not Ready after `up` ({pod.get('status', {}).get('phase')})")
    ran = [s.get("image") for s in statuses]
    if ran != [image]:
        raise OperatorError(f"operator {name}: runs {', '.join(map(str, ran))}, its chart names {image}")
    wanted = operator_tolerations()  # the stack's values for both charts: one rule, k8s/operators.py
    taints = {str(t["key"]) for t in wanted}
    lost = _lost_node_seconds(pod["spec"].get("tolerations", []), taints)
    if lost != _lost_node_seconds(wanted, taints):
        after = ", ".join(f"{f'{lost[t]} s' if t in lost else 'never'} ({t})" for t in sorted(taints))
        raise OperatorError(
            f"operator {name}: leaves a lost node after {after}; the stack gives its chart {OPERATOR_NODE_LOSS_S} s"
        )
    return (
        f"operator {name}: Ready on {pod['spec'].get('nodeName')}, image {image}, "
        f"leaves a lost node after {OPERATOR_NODE_LOSS_S} s"
    )


def check_running(env: Environment, kubectl: Kubectl, say: Say) -> None:
    """After `up`: each operator a Ready pod of its chart, and Kueue's visibility API served through the API server."""
    for namespace, image in images().items():
        say(pod_line(namespace, image, _items(kubectl, "pods", "-n", namespace)))
    queue = cluster_queue_name(env.tenant(env.job.tenant))
    path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{queue}/pendingworkloads"
    try:
        kind = json.loads(kubectl("get", "--raw", path)).get("kind")
    except KubeError as exc:
        raise OperatorError(f"Kueue's visibility API: {path} did not answer: {exc}") from None
    if kind != "PendingWorkloadsSummary":
        raise OperatorError(f"Kueue's visibility API: {path} answered a {kind}, not a PendingWorkloadsSummary")
    say(f"operator {KUEUE_NAMESPACE}: its visibility API answers through the API server ({queue})")


def kept_crds() -> list[str]:
    """The CRDs in the bundled KubeRay chart's `crds/` folder: Helm installs them and never deletes them."""
    [(chart_file, folder)] = BUNDLED.values()  # the bundled chart and its CRD folder: validate/crds.py
    with tarfile.open(bundled_chart(chart_file)) as chart:
        return sorted(
            yaml.safe_load(chart.extractfile(m).read())["metadata"]["name"]  # type: ignore[union-attr]
            for m in chart.getmembers()
            if m.isfile() and m.name.startswith(folder)
        )


def _operators_or_ray(name: str) -> bool:
    return "kueue" in name or "kuberay" in name or name.endswith(".ray.io")


def leftovers(env: Environment, kubectl: Kubectl) -> list[str]:
    """What of the stack is still there (`kind/name`): its namespaces and the operators' (and so any pod of
    theirs), any Ray object, and the operators' cluster-wide objects, but for KubeRay's CRDs and the
    APIService the API server keeps for their group. The stack's own cluster-wide objects are Kueue's kinds
    (ClusterQueue, ResourceFlavor, Topology, WorkloadPriorityClass), which go with Kueue's CRDs."""
    kept = {f"customresourcedefinitions/{crd}" for crd in kept_crds()}
    found: list[str] = []
    namespaces = {*(n["metadata"]["name"] for n in tenant_namespaces(env)), KUEUE_NAMESPACE, KUBERAY_NAMESPACE}
    found += [
        f"namespaces/{n}" for n in sorted(namespaces & {o["metadata"]["name"] for o in _items(kubectl, "namespaces")})
    ]
    crds = {c["metadata"]["name"] for c in _items(kubectl, "customresourcedefinitions")}
    for kind in RAY_KINDS:
        if f"{kind}.ray.io" in crds:
            found += [
                f"{kind}/{o['metadata']['namespace']}/{o['metadata']['name']}" for o in _items(kubectl, kind, "-A")
            ]
    for kind in CLUSTER_KINDS:
        for obj in _items(kubectl, kind):
            name = obj["metadata"]["name"]
            if not _operators_or_ray(name) or f"{kind}/{name}" in kept:
                continue
            # The API server registers an APIService for each CRD group it serves (v1.ray.io), itself.
            if kind == "apiservices" and name.endswith(".ray.io"):
                continue
            found.append(f"{kind}/{name}")
    return sorted(found)


def check_destroyed(env: Environment, kubectl: Kubectl, say: Say) -> None:
    """After `destroy`: nothing of the stack left within `GONE_WITHIN_S` (namespaces empty themselves), but
    KubeRay's CRDs, which Helm keeps; raises OperatorError naming what is left."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while left := leftovers(env, kubectl):
        if time.monotonic() > deadline:
            raise OperatorError(
                f"destroy left {len(left)} object(s) of the stack after {GONE_WITHIN_S}s: {', '.join(left[:8])}"
            )
        time.sleep(2)
    say(
        f"destroy: nothing of the stack left but KubeRay's CRDs ({', '.join(kept_crds())}), which Helm keeps "
        "(a chart's crds/ folder is never deleted)"
    )
