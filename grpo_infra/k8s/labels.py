"""Names every Kubernetes object of the stack shares: who manages it, which job it belongs to, and the
job's Ray token Secret. They sit below every renderer in this package, so none imports another for a
name.
"""

from __future__ import annotations

from ..spec import Environment

MANAGED_BY = {"app.kubernetes.io/managed-by": "grpo-infra"}
# On every pod of a job's Ray cluster (head, workers, submitter): what budgets, policies and
# `kubectl -l` select the job's pods by.
JOB_LABEL = "grpo-infra/job"
# KubeRay labels each Ray pod with its role (`head` or `worker`; ray-operator utils/constant.go
# `RayNodeTypeLabelKey`).
NODE_TYPE_LABEL = "ray.io/node-type"


def head_pod_labels(env: Environment) -> dict[str, str]:
    """Labels that pick out the job's Ray head pod: for `kubectl -l` and the submitter's anti-affinity."""
    return {JOB_LABEL: env.job.name, NODE_TYPE_LABEL: "head"}


def ray_token_secret_name(env: Environment) -> str:
    """The job's Ray token Secret, named so the tenant's Role can grant `get` on it alone.

    With `authOptions.secretName` KubeRay skips generating a token per RayCluster and reads key
    `auth_token` of this Secret for every Ray container and the submitter (kuberay v1.7.0,
    ray-operator/apis/ray/v1/raycluster_types.go:125-129; controllers/ray/common/pod.go:411;
    controllers/ray/rayjob_controller.go:658). Pulumi creates it once with a random value.
    """
    return f"{env.job.name}-ray-token"
