"""Who may do what: tenant service accounts and roles, the job's secrets, and the Ray pods' network.

Secrets are rendered only as references (namespace, name, key, the Pulumi config key they come from);
the Secret holding the value is created by Pulumi from the stack's encrypted config, never written to
a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..spec import Environment
from ..spec.job import SecretRef
from .labels import JOB_LABEL, MANAGED_BY, ray_token_secret_name
from .network import metrics_ports
from .operators import KUBERAY_NAMESPACE

SECRET_KEY = "value"
TENANT_ACCOUNT = "grpo-submitter"
TENANT_ROLE = "grpo-rayjobs"
# Ray's metrics port on every Ray pod, where KubeRay points `--metrics-export-port` unless told otherwise
# (kuberay v1.6.2 ray-operator/controllers/ray/utils/constant.go `DefaultMetricsPort`).
RAY_METRICS_PORT = 8080
READ = ("get", "list", "watch")


@dataclass(frozen=True)
class SecretReference:
    """A Kubernetes Secret the RayJob reads one environment variable from."""

    namespace: str
    name: str
    key: str
    env: str
    config: str

    def as_dict(self) -> dict[str, str]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "key": self.key,
            "env": self.env,
            "fromConfig": f"grpo-infra:{self.config} (secret)",
        }


def secret_name(ref: SecretRef) -> str:
    """`wandbApiKey` → `grpo-wandb-api-key`: a DNS name derived from the config key."""
    kebab = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", ref.config).replace("_", "-").lower()
    return f"grpo-{kebab}"


def secret_references(env: Environment) -> list[SecretReference]:
    """One Secret per `secure:` value the job uses, in the job's namespace."""
    return [
        SecretReference(env.job.tenant, secret_name(ref), SECRET_KEY, ref.env, ref.config) for ref in env.job.secrets
    ]


def secret_metadata(ref: SecretReference) -> dict[str, Any]:
    """Metadata of the Secret Pulumi creates for a reference (its data never leaves Pulumi)."""
    return {"name": ref.name, "namespace": ref.namespace, "labels": dict(MANAGED_BY)}


def readable_secrets(env: Environment, tenant: str) -> list[str]:
    """The Secrets a tenant's account may read: the Ray token of the job in its namespace, nothing else
    (W&B and HF tokens reach the pods through secretKeyRef, which needs no RBAC of the tenant's)."""
    assert env.kubernetes is not None
    if tenant != env.job.tenant or env.kubernetes.ray_job.ray_auth != "token":
        return []
    return [ray_token_secret_name(env)]


def tenant_access(env: Environment) -> list[dict[str, Any]]:
    """Per tenant: a ServiceAccount and a Role that manage RayJobs in the tenant's namespace only."""
    out: list[dict[str, Any]] = []
    for t in env.tenants:
        readable = readable_secrets(env, t.name)
        # Reading the job's Ray token by name (`get` only, no list). Note that creating RayJobs already
        # lets this account have KubeRay mount any Secret of the namespace into a pod it controls.
        secret_rule = (
            [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": readable, "verbs": ["get"]}]
            if readable
            else []
        )
        meta = {"namespace": t.name, "labels": dict(MANAGED_BY)}
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": TENANT_ACCOUNT, **meta}})
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": TENANT_ROLE, **meta},
                "rules": [
                    {
                        "apiGroups": ["ray.io"],
                        "resources": ["rayjobs"],
                        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                    },
                    {
                        "apiGroups": ["ray.io"],
                        "resources": ["rayjobs/status", "rayclusters", "rayclusters/status", "raycronjobs"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "pods/log", "services", "events"],
                        "verbs": ["get", "list", "watch"],
                    },
                    # `kubectl logs job/<job>` reads the submitter Job first (the driver's log outlives the
                    # Ray cluster there); `kubectl get events` / `describe` show Pending and eviction reasons.
                    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
                    # The dashboard is reached through `kubectl port-forward`, never a public address.
                    {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]},
                    # `kubectl exec` into the head for `ray debug` (docs/debugging.md). No new power: the
                    # account already runs any command in these pods through the RayJobs it creates.
                    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
                    *secret_rule,
                    # `patch` only to set a deactivated Workload's `spec.active` back to true (a RayCluster
                    # past its `maxExecutionHours`, a gang past `backoffLimitCount`): Kueue admits a Workload
                    # only while `active` (Kueue v0.19.2 apis/kueue/v1beta2/workload_types.go,
                    # WorkloadSpec.Active). Never create, update or delete: Kueue owns the Workloads.
                    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": [*READ, "patch"]},
                    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": list(READ)},
                ],
            }
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": TENANT_ROLE, **meta},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": TENANT_ACCOUNT, "namespace": t.name}],
            }
        )
    return out


def ray_network_policy(env: Environment) -> dict[str, Any]:
    """The job's Ray pods accept traffic only from their own namespace and the KubeRay operator, and on
    Ray's metrics ports (`metrics_ports`) from `kubernetes.monitoringNamespace` (Prometheus), when the
    stack names one.

    The head listens on its pod address (the operator and the submitter reach the dashboard there,
    `kubectl port-forward` reaches it through the pod's loopback); this policy and a ClusterIP service
    keep it off every other network path.
    """
    assert env.kubernetes is not None
    job = env.job
    ingress: list[dict[str, Any]] = [
        {
            "from": [
                {"podSelector": {}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}}},
            ]
        }
    ]
    monitoring = env.kubernetes.monitoring_namespace
    if monitoring is not None:
        ingress.append(
            {
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring}}}],
                "ports": [{"protocol": "TCP", "port": port} for port in metrics_ports(env, RAY_METRICS_PORT)],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{job.name}-ray", "namespace": job.tenant, "labels": dict(MANAGED_BY)},
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: job.name}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
