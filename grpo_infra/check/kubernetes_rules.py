"""Kubernetes feasibility, judged on the objects the stack would apply.

The rules themselves live with the validators (`grpo_infra.validate.rules`: KubeRay's and Kueue's
webhook rules, Kueue's flavor and quota assignment); here their findings are tied back to the spec
field a platform engineer has to change.
"""

from __future__ import annotations

import re
from typing import Any

from ..k8s import objects
from ..k8s.placement import node_share, parse_quantity
from ..spec import ENVIRONMENT_KEY, Environment
from ..validate.rules import admission_errors, rayjob_errors
from .violation import Violation

ENV = ENVIRONMENT_KEY


def kubernetes_violations(env: Environment) -> list[Violation]:
    """Webhook rules, Kueue admission (quota, taints, node labels) and per-node fit of every worker pod."""
    rendered = objects(env)
    jobs = [o for o in rendered if o["kind"] == "RayJob"]
    tenant_index = next(i for i, t in enumerate(env.tenants) if t.name == env.job.tenant)
    out = [Violation("kuberay-webhook", f"{ENV}.job.name", e) for job in jobs for e in rayjob_errors(job)]
    out += [
        Violation("kueue-admission", f"{ENV}.tenants[{tenant_index}].gpuQuota", e, _shortfall(e))
        for e in admission_errors(rendered)
    ]
    for job in jobs:
        out += _worker_fit(env, job)
    return out


def _shortfall(message: str) -> str:
    """`quota too small (cpu 752 > 376, ...)` → `cpu 376, ...`: the first flavor's shortfall per resource."""
    first = message.split("; flavor ")[0]
    parts = []
    for resource, need, have in re.findall(r"([A-Za-z0-9./-]+) ([\d.e+]+) > ([\d.e+]+)", first):
        short = float(need) - float(have)
        parts.append(f"{resource} {short / 2**30:.0f}Gi" if resource == "memory" else f"{resource} {short:g}")
    return ", ".join(parts)


def _worker_fit(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """Each worker pod must fit on one node of its pool after the per-node reserve."""
    out = []
    for group in job["spec"]["rayClusterSpec"].get("workerGroupSpecs", []):
        selector = group["template"]["spec"].get("nodeSelector", {})
        index, pool = next(
            ((i, p) for i, p in enumerate(env.pools) if p.labels and p.labels.items() <= selector.items()),
            (None, None),
        )
        if pool is None:
            continue
        offer = {k: parse_quantity(v) for k, v in node_share(env, pool).resources().items()}
        for container in group["template"]["spec"]["containers"]:
            for resource, value in container.get("resources", {}).get("requests", {}).items():
                need, have = parse_quantity(value), offer.get(resource, 0.0)
                if need > have:
                    out.append(
                        Violation(
                            "pod-fits-node",
                            f"{ENV}.pools[{index}]",
                            f"a {group['groupName']} pod asks for {value} {resource}; a node of {pool.name} offers "
                            f"{have:g} after the reserve",
                            f"{need - have:g} {resource}",
                        )
                    )
    return out
