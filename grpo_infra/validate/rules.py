"""What the admission webhooks and the scheduler would refuse, checked on the rendered objects.

Schemas cannot see across fields or objects: KubeRay's and Kueue's webhooks check the RayJob's name,
groups and flags, and Kueue admits a gang only if its pods fit a flavor's quota and tolerate its
taints. A job that breaks one of these is accepted by `kubectl apply` and then never runs.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from typing import Any

from ..k8s.placement import parse_quantity
from ..k8s.rayjob import PRIORITY_LABEL, QUEUE_LABEL

MAX_NAME = 47  # KubeRay: RayJob names become RayCluster and Service name prefixes.
MAX_WORKER_GROUPS = 16  # Kueue: 18 PodSets minus head and submitter in K8sJobMode.
RESERVED_GROUPS = {"head", "submitter"}
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def rayjob_errors(job: dict[str, Any], max_name: int = MAX_NAME) -> list[str]:
    """KubeRay's and Kueue's webhook rules for one RayJob (or a RayCluster seen as one, whose name may be
    `max_name` 53 long: `grpo_infra.k8s.kinds.gang_view`)."""
    out: list[str] = []
    name = job["metadata"]["name"]
    spec = job.get("spec", {})
    cluster = spec.get("rayClusterSpec")
    if len(name) > max_name or not _DNS_1035.match(name):
        out.append(f"metadata.name: {name!r} must be a DNS-1035 label of at most {max_name} characters")
    if "clusterSelector" in spec:
        out.append("spec.clusterSelector: a Kueue-managed RayJob brings its own cluster (rayClusterSpec)")
    if cluster is None:
        return [*out, "spec.rayClusterSpec: required"]
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        out.append("spec.suspend needs spec.shutdownAfterJobFinishes: true")
    if QUEUE_LABEL in job["metadata"].get("labels", {}) and not spec.get("shutdownAfterJobFinishes"):
        out.append("spec.shutdownAfterJobFinishes: Kueue requires true")
    if spec.get("ttlSecondsAfterFinished", 0) > 0 and not spec.get("shutdownAfterJobFinishes"):
        out.append("spec.ttlSecondsAfterFinished needs spec.shutdownAfterJobFinishes: true")
    if cluster.get("enableInTreeAutoscaling"):
        out.append("spec.rayClusterSpec.enableInTreeAutoscaling: a gang has a fixed size; must be false")
    groups = cluster.get("workerGroupSpecs", [])
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode == "K8sJobMode" and len(groups) > MAX_WORKER_GROUPS:
        out.append(f"spec.rayClusterSpec.workerGroupSpecs: {len(groups)} groups, at most {MAX_WORKER_GROUPS}")
    names = [g.get("groupName") for g in groups]
    for i, group in enumerate(groups):
        where = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
        if group.get("groupName") in RESERVED_GROUPS:
            out.append(f"{where}.groupName: {group['groupName']!r} is reserved by Kueue")
        if names.count(group.get("groupName")) > 1:
            out.append(f"{where}.groupName: {group['groupName']!r} is used twice")
        sizes = {group.get(k) for k in ("replicas", "minReplicas", "maxReplicas")}
        if len(sizes) != 1:
            out.append(f"{where}: replicas, minReplicas and maxReplicas must be equal for a gang")
    head = cluster.get("headGroupSpec", {})
    if head.get("serviceType", "ClusterIP") != "ClusterIP":
        out.append("spec.rayClusterSpec.headGroupSpec.serviceType: the Ray head is reached in-cluster only (ClusterIP)")
    if head.get("enableIngress"):
        out.append("spec.rayClusterSpec.headGroupSpec.enableIngress: the dashboard is never published")
    return [f"{_key(job)}: {e}" for e in out]


def _pod_requests(template: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for container in template.get("spec", {}).get("containers", []):
        for name, value in container.get("resources", {}).get("requests", {}).items():
            total[name] += parse_quantity(value)
    return total


# Kueue v0.19.2 judges each pod set against each flavor in
# pkg/scheduler/flavorassigner/flavorassigner.go, checkFlavorForPodSets (lines 1208-1257): first the
# flavor's NoSchedule/NoExecute taints against the pod's tolerations plus the flavor's own
# `spec.tolerations` (line 1239), then the pod's node selector restricted to the flavor's own label keys
# (flavorSelector, lines 1278-1322) against the flavor's labels. On admission Kueue copies the flavor's
# node labels and tolerations into the pods (pkg/podset/podset.go, FromAssignment, lines 87-88): a pod
# that selects nothing can still be assigned, and sent to, any untainted flavor.


def _tolerates_one(t: dict[str, Any], taint: dict[str, Any]) -> bool:
    """k8s.io/api/core/v1 Toleration.ToleratesTaint (vendored in Kueue v0.19.2, toleration.go lines 52-77)."""
    if t.get("effect") and t["effect"] != taint["effect"]:
        return False
    if t.get("key") and t["key"] != taint["key"]:
        return False
    operator, value, taint_value = t.get("operator", "Equal") or "Equal", t.get("value", ""), taint.get("value", "")
    if operator == "Equal":
        return value == taint_value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):  # numeric comparison, enabled in Kueue's call (flavorassigner.go line 1241)
        try:
            tolerated, tainted = int(value), int(taint_value)
        except ValueError:
            return False
        return tainted < tolerated if operator == "Lt" else tainted > tolerated
    return False


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    return any(_tolerates_one(t, taint) for t in tolerations)


def _matches(flavor: dict[str, Any], selector: dict[str, str]) -> bool:
    """The pod's nodeSelector, keys the flavor does not label ignored, against the flavor's labels.

    A flavor label the pod does not select is no obstacle: Kueue adds it to the pod on admission.
    """
    labels = flavor.get("spec", {}).get("nodeLabels", {})
    return all(labels[k] == v for k, v in selector.items() if k in labels)


def admission_errors(objects: list[dict[str, Any]]) -> list[str]:
    """Would Kueue admit each RayJob: queue and priority class exist, pods fit a flavor's quota and taints."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        by_kind[obj["kind"]].append(obj)
    local = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in by_kind["LocalQueue"]}
    cluster = {q["metadata"]["name"]: q for q in by_kind["ClusterQueue"]}
    flavors = {f["metadata"]["name"]: f for f in by_kind["ResourceFlavor"]}
    priorities = {p["metadata"]["name"] for p in by_kind["WorkloadPriorityClass"]}
    out: list[str] = []
    for job in by_kind["RayJob"]:
        labels, ns = job["metadata"].get("labels", {}), job["metadata"]["namespace"]
        if QUEUE_LABEL not in labels:
            continue
        problems: list[str] = []
        lq = local.get((ns, labels[QUEUE_LABEL]))
        cq = cluster.get(lq["spec"]["clusterQueue"]) if lq else None
        if cq is None:
            problems.append(f"queue {labels[QUEUE_LABEL]!r}: no LocalQueue in {ns} leading to a ClusterQueue")
        if PRIORITY_LABEL in labels and labels[PRIORITY_LABEL] not in priorities:
            problems.append(f"priority class {labels[PRIORITY_LABEL]!r}: no such WorkloadPriorityClass")
        if cq is not None:
            problems += _fits(job, cq, flavors)
        out += [f"{_key(job)}: {p}" for p in problems]
    return out


# Kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go, getSubmitterTemplate and
# defaultSubmitterResources (lines 252-286): the submitter pod set Kueue counts when a K8sJobMode RayJob
# brings no submitterPodTemplate.
_DEFAULT_SUBMITTER = {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


def _podsets(job: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """The pod sets Kueue builds from a RayJob, with their pod counts.

    Kueue v0.19.2: pkg/controller/jobs/raycluster/common.go, BuildPodSets (line 76: the head, count 1;
    each worker group, count replicas × numOfHosts by effectiveWorkerCount, lines 64-73) and
    pkg/controller/jobs/rayjob/rayjob_controller.go, addSubmitterPodSet (lines 289-311: one submitter pod
    in K8sJobMode, the default submission mode).
    """
    cluster = job["spec"]["rayClusterSpec"]
    sets = [("head", 1, cluster["headGroupSpec"]["template"])]
    for g in cluster.get("workerGroupSpecs", []):
        sets.append((g["groupName"], g.get("replicas", 1) * max(g.get("numOfHosts", 1), 1), g["template"]))
    if job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode":
        sets.append(("submitter", 1, job["spec"].get("submitterPodTemplate", _DEFAULT_SUBMITTER)))
    return sets


def _eligible(
    spec: dict[str, Any], order: list[str], flavors: dict[str, dict[str, Any]]
) -> tuple[list[str], dict[str, str]]:
    """The flavors a pod set may use, in the ClusterQueue's order, and why each other one is refused
    (checkFlavorForPodSets: taints first, then the node selector)."""
    usable: list[str] = []
    refused: dict[str, str] = {}
    for flavor_name in order:
        flavor = flavors.get(flavor_name)
        if flavor is None:
            refused[flavor_name] = f"flavor {flavor_name} does not exist"
            continue
        tolerations = [*spec.get("tolerations", []), *flavor.get("spec", {}).get("tolerations", [])]
        untolerated = [
            t
            for t in flavor.get("spec", {}).get("nodeTaints", [])
            if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, t)
        ]
        if untolerated:
            refused[flavor_name] = f"flavor {flavor_name}: no toleration for taint {untolerated[0]['key']}"
        elif not _matches(flavor, spec.get("nodeSelector", {})):
            refused[flavor_name] = f"flavor {flavor_name}: node labels do not match the pods' nodeSelector"
        else:
            usable.append(flavor_name)
    return usable, refused


def _fits(job: dict[str, Any], cq: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> list[str]:
    """Whether some assignment of usable flavors to the pod sets fits the quota, as Kueue finds one.

    Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go: findFlavorForPodSets (lines 1061-1206)
    walks a resource group's flavors in order and stops at the first that fits; fitsResourceQuota
    (lines 1330-1380) adds the pod set's request to what earlier pod sets of the workload took from the
    flavor and compares it with the quota (the nominal quota here: every borrowingLimit is 0). A
    resource no resource group covers is "unavailable in ClusterQueue" (line 1071). When the workload
    does not fit, the next scheduling cycle resumes each pod set's scan after the flavor it last tried
    (line 1088; pkg/workload/workload.go NextFlavorToTryForPodSetResource, lines 226-238; wrapping to
    the first flavor after the last, flavorassigner.go lines 1194-1199; kept between cycles by
    pkg/scheduler/scheduler.go recordAssignment, line 284), so every combination of usable flavors is
    tried in turn: the head first taking the GPU flavor does not keep a gang out for good (checked
    against real Kueue by tests/kube/test_admission_model.py). The reasons given are those of the
    first scan, the one a user sees first in the Workload's status.
    """
    groups = cq["spec"].get("resourceGroups", [])
    quota = {
        (f["name"], r["name"]): parse_quantity(r["nominalQuota"])
        for g in groups
        for f in g["flavors"]
        for r in f["resources"]
    }
    order = [f["name"] for g in groups for f in g["flavors"]]
    podsets = [
        (name, count, _pod_requests(t), *_eligible(t.get("spec", {}), order, flavors))
        for name, count, t in _podsets(job)
    ]
    if all(usable for *_, usable, _ in podsets) and any(
        _fits_together(podsets, combo, quota) for combo in itertools.product(*(u for *_, u, _ in podsets))
    ):
        return []
    return _first_scan_problems(podsets, order, quota, cq["metadata"]["name"])


def _fits_together(podsets: list[Any], combo: tuple[str, ...], quota: dict[tuple[str, str], float]) -> bool:
    """Whether the pod sets, each on its flavor of `combo`, fit the quota together."""
    used: dict[tuple[str, str], float] = defaultdict(float)
    for (_, count, requests, *_), flavor_name in zip(podsets, combo, strict=True):
        for r, v in requests.items():
            used[(flavor_name, r)] += v * count
    return all(v <= quota.get(key, 0) for key, v in used.items())


def _first_scan_problems(
    podsets: list[Any], order: list[str], quota: dict[tuple[str, str], float], cq_name: str
) -> list[str]:
    """Each pod set given the first usable flavor with quota left, as Kueue's first scan does; the
    reasons of every pod set that finds none."""
    used: dict[tuple[str, str], float] = defaultdict(float)
    takers: dict[str, list[str]] = defaultdict(list)  # the pod sets already assigned to each flavor
    problems = []
    for name, count, requests, _, refused in podsets:
        chosen, reasons = None, []
        for flavor_name in order:
            if flavor_name in refused:
                reasons.append(refused[flavor_name])
                continue
            short = [
                f"{r} {used[(flavor_name, r)] + requests[r] * count:g} > {quota.get((flavor_name, r), 0):g}"
                for r in requests
                if used[(flavor_name, r)] + requests[r] * count > quota.get((flavor_name, r), 0)
            ]
            if short:
                before = f", after pod sets {', '.join(takers[flavor_name])}" if takers[flavor_name] else ""
                reasons.append(f"flavor {flavor_name}: quota too small ({', '.join(short)}{before})")
                continue
            chosen = flavor_name
            break
        if chosen is None:
            problems.append(f"pod set {name} ({count} pods) fits no flavor of {cq_name}: {'; '.join(reasons)}")
            continue
        for r, v in requests.items():
            used[(chosen, r)] += v * count
        takers[chosen].append(name)
    return problems
