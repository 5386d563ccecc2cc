"""Pod Security Standards: the strictest level the job's pods pass, enforced on the tenant namespaces.

The levels and their controls are Kubernetes' "Pod Security Standards"
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), enforced by the built-in
Pod Security admission through the namespace label `pod-security.kubernetes.io/enforce`. Only the
controls a RayJob's pods can touch are judged here; a pod that fails a level's control is refused by the
API server at that level, so the namespace must not be labelled stricter than its pods.
"""

from __future__ import annotations

from typing import Any

LEVELS = ("restricted", "baseline", "privileged")  # strictest first
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# Baseline: "Adding additional capabilities beyond those listed below must be disallowed."
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Restricted: the only volume types allowed.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def baseline_failures(pod: dict[str, Any]) -> list[str]:
    """What keeps a pod spec out of `baseline` (then only `privileged` admits it)."""
    out = [f"{field}: true" for field in ("hostNetwork", "hostPID", "hostIPC") if pod.get(field)]
    out += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    for container in pod.get("containers", []):
        context = container.get("securityContext", {})
        if context.get("privileged"):
            out.append(f"container {container['name']}: privileged")
        added = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        out += [f"container {container['name']}: capability {cap}" for cap in sorted(added)]
        out += [f"container {container['name']}: hostPort" for p in container.get("ports", []) if p.get("hostPort")]
    return out


def restricted_failures(pod: dict[str, Any]) -> list[str]:
    """What keeps a pod spec out of `restricted`, beyond baseline's failures."""
    out = [
        f"volume {v['name']}: {next(k for k in v if k != 'name')}"
        for v in pod.get("volumes", [])
        if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES
    ]
    pod_context = pod.get("securityContext", {})
    for container in pod.get("containers", []):
        context = container.get("securityContext", {})
        name = container["name"]
        if context.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name}: allowPrivilegeEscalation not false")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            out.append(f"container {name}: runAsNonRoot not true")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"container {name}: no RuntimeDefault seccomp profile")
        if "ALL" not in context.get("capabilities", {}).get("drop", []):
            out.append(f"container {name}: capabilities not dropped (ALL)")
    return out


def pod_level(pod: dict[str, Any]) -> str:
    """The strictest level this pod spec passes."""
    if baseline_failures(pod):
        return "privileged"
    if restricted_failures(pod):
        return "baseline"
    return "restricted"


def loosest(levels: list[str]) -> str:
    """The strictest level every one of these passes: the loosest of them."""
    return max(levels, key=LEVELS.index, default="restricted")


def job_pods(ray_job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pod specs of a RayJob by role: head, each worker group, the submitter."""
    cluster = ray_job["spec"]["rayClusterSpec"]
    pods = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    for group in cluster.get("workerGroupSpecs", []):
        pods[group["groupName"]] = group["template"]["spec"]
    if "submitterPodTemplate" in ray_job["spec"]:
        pods["submitter"] = ray_job["spec"]["submitterPodTemplate"]["spec"]
    return pods
