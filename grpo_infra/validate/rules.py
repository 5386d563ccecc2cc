"""What the admission webhooks and the scheduler would refuse, checked on the rendered objects.

Schemas cannot see across fields or objects: KubeRay's and Kueue's webhooks check the RayJob's name,
groups and flags, and Kueue admits a gang only if its pods fit a flavor's quota and tolerate its
taints. A job that breaks one of these is accepted by `kubectl apply` and then never runs.
"""

from __future__ import annotations

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


def rayjob_errors(job: dict[str, Any]) -> list[str]:
    """KubeRay's and Kueue's webhook rules for one RayJob."""
    out: list[str] = []
    name = job["metadata"]["name"]
    spec = job.get("spec", {})
    cluster = spec.get("rayClusterSpec")
    if len(name) > MAX_NAME or not _DNS_1035.match(name):
        out.append(f"metadata.name: {name!r} must be a DNS-1035 label of at most {MAX_NAME} characters")
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


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def _matches(flavor: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = flavor.get("spec", {}).get("nodeLabels", {})
    return all(labels.get(k, v) == v for k, v in selector.items()) and all(k in selector for k in labels)


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


def _podsets(job: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    cluster = job["spec"]["rayClusterSpec"]
    sets = [("head", 1, cluster["headGroupSpec"]["template"])]
    for g in cluster.get("workerGroupSpecs", []):
        sets.append((g["groupName"], g.get("replicas", 1) * g.get("numOfHosts", 1), g["template"]))
    if job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode" and "submitterPodTemplate" in job["spec"]:
        sets.append(("submitter", 1, job["spec"]["submitterPodTemplate"]))
    return sets


def _fits(job: dict[str, Any], cq: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> list[str]:
    """Assign each PodSet the first flavor it may use (as Kueue does) and compare the sum with the quota."""
    groups = cq["spec"].get("resourceGroups", [])
    quota = {
        (f["name"], r["name"]): parse_quantity(r["nominalQuota"])
        for g in groups
        for f in g["flavors"]
        for r in f["resources"]
    }
    order = [f["name"] for g in groups for f in g["flavors"]]
    used: dict[tuple[str, str], float] = defaultdict(float)
    problems = []
    for name, count, template in _podsets(job):
        spec = template.get("spec", {})
        requests = _pod_requests(template)
        chosen, reasons = None, []
        for flavor_name in order:
            flavor = flavors.get(flavor_name)
            if flavor is None:
                reasons.append(f"flavor {flavor_name} does not exist")
                continue
            untolerated = [
                t
                for t in flavor.get("spec", {}).get("nodeTaints", [])
                if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(spec.get("tolerations", []), t)
            ]
            if untolerated:
                reasons.append(f"flavor {flavor_name}: no toleration for taint {untolerated[0]['key']}")
                continue
            if not _matches(flavor, spec.get("nodeSelector", {})):
                reasons.append(f"flavor {flavor_name}: node labels do not match the pods' nodeSelector")
                continue
            short = [
                f"{r} {requests[r] * count:g} > {quota.get((flavor_name, r), 0):g}"
                for r in requests
                if used[(flavor_name, r)] + requests[r] * count > quota.get((flavor_name, r), 0)
            ]
            if short:
                reasons.append(f"flavor {flavor_name}: quota too small ({', '.join(short)})")
                continue
            chosen = flavor_name
            break
        if chosen is None:
            problems.append(
                f"pod set {name} ({count} pods) fits no flavor of {cq['metadata']['name']}: {'; '.join(reasons)}"
            )
            continue
        for r, v in requests.items():
            used[(chosen, r)] += v * count
    return problems
