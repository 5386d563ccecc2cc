"""Every `kubectl` command the docs give a tenant works with the tenant's Role, and the Role grants Kueue's
Workloads no verb the docs do not use (R10: reactivating a RayCluster past its lifetime needs `patch`)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from grpo_infra.k8s.access import tenant_access
from tests.conftest import ROOT

from .conftest import env_of

# Resources a namespaced Role cannot grant: the commands on them are an administrator's.
CLUSTER_SCOPED = {"node", "nodes", "crd", "crds", "apiservice", "apiservices"}
# kubectl's names for the namespaced resources the docs use → (API group, resource).
RESOURCES = {
    "pod": ("", "pods"),
    "pods": ("", "pods"),
    "svc": ("", "services"),
    "service": ("", "services"),
    "secret": ("", "secrets"),
    "events": ("", "events"),
    "job": ("batch", "jobs"),
    "rayjob": ("ray.io", "rayjobs"),
    "rayjobs": ("ray.io", "rayjobs"),
    "workload": ("kueue.x-k8s.io", "workloads"),
    "workloads": ("kueue.x-k8s.io", "workloads"),
}
FLAGS_WITH_VALUE = {"-n", "--namespace", "-l", "-o", "-c", "-p", "--type"}
# Commands on nodes only: not the tenant's.
NODE_COMMANDS = {"drain", "taint", "cordon", "uncordon", "top"}
# kubectl's own commands (`kubectl help`); any other word after `kubectl` is prose or a plugin (`kubectl kueue`).
KUBECTL_COMMANDS = {
    *NODE_COMMANDS,
    *("create", "expose", "run", "set", "explain", "get", "edit", "delete", "rollout", "scale", "autoscale"),
    *("certificate", "cluster-info", "describe", "logs", "attach", "exec", "port-forward", "proxy", "cp"),
    *("auth", "debug", "events", "diff", "apply", "patch", "replace", "wait", "label", "annotate"),
}


@dataclass(frozen=True)
class Access:
    group: str
    resource: str
    verb: str


def _code(markdown: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks: where the docs put commands to run."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.M | re.S)
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return spans + [line for block in fenced for line in block.splitlines()]


def documented_commands() -> list[str]:
    """Each `kubectl ...` command in docs/, cut at pipes, `$(` and comments."""
    out = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for code in _code(page.read_text()):
            for part in re.split(r"\||\$\(|\)|#|;", code):
                found = re.search(r"(?:^|\s)kubectl\s+(.*)", part)
                if found:
                    out.append("kubectl " + found.group(1).rstrip(" \\"))
    return out


def _positionals(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-") and arg != "--":
            out.append(arg)
        elif arg == "--":
            break
    return out


def _resource(word: str) -> tuple[str, str]:
    kind = word.split("/")[0].lower()
    assert kind in RESOURCES, f"teach this test kubectl's resource `{kind}`"
    return RESOURCES[kind]


def access_of(command: str) -> set[Access]:
    """What the API server authorizes for one kubectl command (RBAC verbs of its requests); empty for a
    command that is not a tenant's (cluster-scoped, on nodes, or a placeholder such as `kubectl ...`)."""
    words = _positionals(shlex.split(command)[1:])
    if not words or words[0] in NODE_COMMANDS or words[0] not in KUBECTL_COMMANDS:
        return set()
    sub, rest = words[0], words[1:]
    if rest and rest[0].split("/")[0].lower() in CLUSTER_SCOPED:
        return set()
    if sub == "logs":
        # `logs job/<job>` resolves the Job to its pod first; `logs POD` reads the pod.
        extra = {Access(*_resource(rest[0]), "get")} if rest and "/" in rest[0] else set()
        return {Access("", "pods", "get"), Access("", "pods/log", "get"), *extra}
    if sub in ("exec", "port-forward"):
        target = {Access(*_resource(rest[0]), "get")} if rest and "/" in rest[0] else set()
        return {Access("", "pods", "get"), Access("", f"pods/{sub.replace('-', '')}", "create"), *target}
    if not rest:
        return set()
    group, resource = _resource(rest[0])
    named = "/" in rest[0] or len(rest) > 1
    verb = {"get": "get" if named else "list", "describe": "get", "patch": "patch", "delete": "delete"}.get(sub)
    assert verb is not None, f"teach this test kubectl's `{sub}`: {command}"
    return {Access(group, resource, verb)}


def granted(role: dict[str, Any]) -> set[Access]:
    return {
        Access(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def tenant_role(stack: str) -> dict[str, Any]:
    env = env_of(stack)
    return next(o for o in tenant_access(env) if o["kind"] == "Role" and o["metadata"]["namespace"] == env.job.tenant)


def documented_access() -> dict[Access, str]:
    return {access: command for command in documented_commands() for access in access_of(command)}


def test_the_docs_reactivate_a_workload_with_patch() -> None:
    """Guards the parser: the command R10 is about is among the ones read."""
    assert Access("kueue.x-k8s.io", "workloads", "patch") in documented_access()


def test_every_documented_tenant_command_is_granted() -> None:
    role = granted(tenant_role("eks-prod"))
    missing = {f"{a.verb} {a.resource}: {cmd}" for a, cmd in documented_access().items() if a not in role}
    assert not missing, "the docs tell a tenant to run what its Role refuses:\n" + "\n".join(sorted(missing))


def test_workloads_get_reads_and_only_the_documented_writes() -> None:
    """Kueue owns the Workloads: a tenant reads them and patches `spec.active`, nothing else."""
    documented = {a.verb for a in documented_access() if a.resource == "workloads"}
    role = {a.verb for a in granted(tenant_role("eks-prod")) if a.resource == "workloads"}
    assert role == {"get", "list", "watch"} | documented
