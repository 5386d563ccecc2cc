"""Kubernetes renderers: spec → plain objects and Helm releases.

Everything here is pure: the same spec gives the same dicts. `synth` writes them to files and the
Pulumi components register exactly these dicts.
"""

from __future__ import annotations

from typing import Any

from ..manifests import dump_yaml, object_filename
from ..spec import Environment
from .access import ray_network_policy, secret_references, tenant_access
from .disruption import pod_disruption_budget
from .gate import gate_config_map
from .kinds import gang_view, workload
from .namespaces import tenant_namespaces
from .operators import helm_releases, kueue_role_patches, uses_kueue
from .queues import queue_objects
from .raycluster import ray_cluster
from .raycronjob import default_local_queue, ray_cron_job, tick_name_policy
from .rayjob import ray_job
from .shipped import guard_config_map, resume_config_map

__all__ = [
    "cron_queues",
    "default_local_queue",
    "gang_view",
    "gate_config_map",
    "guard_config_map",
    "helm_releases",
    "objects",
    "pod_disruption_budget",
    "queue_objects",
    "ray_cluster",
    "ray_cron_job",
    "ray_job",
    "render_files",
    "resume_config_map",
    "secret_references",
    "tenant_access",
    "tenant_namespaces",
    "tick_name_policy",
    "workload",
]


def objects(env: Environment) -> list[dict[str, Any]]:
    """Every Kubernetes object the stack applies, in apply order (Secrets excepted: Pulumi makes those)."""
    gate_code = gate_config_map(env)
    resume_code = resume_config_map(env)
    return [
        *tenant_namespaces(env),
        *tenant_access(env),
        *queue_objects(env),
        *cron_queues(env),
        ray_network_policy(env),
        *([gate_code] if gate_code is not None else []),
        guard_config_map(env),
        *([resume_code] if resume_code is not None else []),
        pod_disruption_budget(env),
        workload(env),
    ]


def cron_queues(env: Environment) -> list[dict[str, Any]]:
    """How a RayCronJob's runs are admitted (`grpo_infra.k8s.raycronjob`): the `default` LocalQueue that
    leads them to the tenant's quota, and the policy that gives each tick one run."""
    assert env.kubernetes is not None
    if env.job.kind != "raycronjob":
        return []
    queue = default_local_queue(env) if env.kubernetes.scheduler == "kueue" else None
    return [queue, *tick_name_policy(env)] if queue is not None else tick_name_policy(env)


def render_files(env: Environment) -> dict[str, str]:
    """`kubernetes/<object>.yaml` per object, `helm/<release>.yaml` per release (and the patches of Kueue's
    roles), and the secret references."""
    files = {f"kubernetes/{object_filename(obj)}": dump_yaml(obj) for obj in objects(env)}
    for release in helm_releases(env):
        body = {k: release[k] for k in ("chart", "repository", "version", "namespace", "values")}
        files[f"helm/{release['name']}.yaml"] = dump_yaml(body)
    if uses_kueue(env):
        # Server-side patches of the Kueue chart's own roles, applied with it (`kueue_role_patches`).
        files["helm/kueue-role-patches.yaml"] = "---\n".join(dump_yaml(p) for p in kueue_role_patches())
    refs = secret_references(env)
    if refs:
        files["kubernetes/secret-references.yaml"] = dump_yaml(
            {
                "note": "Pulumi creates these Secrets from the stack's encrypted config; their values are never rendered.",
                "secrets": [r.as_dict() for r in refs],
            }
        )
    return files
