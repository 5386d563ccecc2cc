"""Protection of a running gang against voluntary disruption: node drains, upgrades, consolidation.

A GRPO gang is all-or-nothing: evicting one worker ends the NCCL process group and costs every step since
the last checkpoint, on every GPU of the gang. What can be refused is refused here; a hardware failure
cannot be, and is handled by the whole-gang restart (`grpo_infra.k8s.node_loss`, docs/kubernetes.md,
"When a node is lost").
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from .labels import JOB_LABEL, MANAGED_BY

# Karpenter (v1) will not consolidate a node running a pod with this annotation, nor drift-replace it unless
# the NodeClaim sets a terminationGracePeriod; expiration and repair still happen
# (https://karpenter.sh/docs/reference/annotations/, https://karpenter.sh/docs/concepts/disruption/).
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def pod_disruption_budget(env: Environment) -> dict[str, Any]:
    """A PodDisruptionBudget allowing no voluntary eviction of any pod of the job (head, workers, submitter).

    The Eviction API (`kubectl drain`, managed node group updates, cluster autoscalers, GKE node upgrades)
    honours it; deleting a pod or losing a node does not go through it.

    `minAvailable` = every pod of the job (the head, one worker per node, the submitter), not
    `maxUnavailable: 0`: Kubernetes resolves `maxUnavailable` (and percentages) through the scale of
    each pod's controller, which a RayCluster or a Job does not offer, and then reports an error instead
    of a budget (k8s.io/kubernetes v1.35.4 pkg/controller/disruption/disruption.go:818-858 and
    `getExpectedScale` :860-910; https://kubernetes.io/docs/tasks/run-application/configure-pdb/
    #arbitrary-controllers-and-selectors). While fewer pods are up (starting, or before the submitter
    exists) no eviction is allowed either.
    """
    job = env.job
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name(env),
            "namespace": job.tenant,
            "labels": {**MANAGED_BY, JOB_LABEL: job.name},
        },
        "spec": {"minAvailable": gang_pods(env), "selector": {"matchLabels": {JOB_LABEL: job.name}}},
    }


def gang_pods(env: Environment) -> int:
    """Pods of a running job: the Ray head, one worker per node of the gang, and for a RayJob (a
    RayCronJob's run too) the K8sJobMode submitter; a RayCluster has none (its gate runs in the head pod)."""
    submitter = 0 if env.job.kind == "raycluster" else 1
    return 1 + env.job_nodes + submitter


def pdb_name(env: Environment) -> str:
    return f"{env.job.name}-gang"


def disruption_annotations(env: Environment) -> dict[str, str]:
    """Pod annotations that keep node autoscalers from removing a node under the gang.

    On EKS, Karpenter-managed GPU nodes would otherwise be consolidated or drift-replaced while the job
    runs; the managed node groups the stack creates ignore the annotation (they honour the PDB). GKE
    runs no Karpenter: its node upgrades are switched off on the pools (`grpo_infra.nodepools.gke`).
    """
    assert env.kubernetes is not None
    if env.kubernetes.provider == "eks":
        return {KARPENTER_DO_NOT_DISRUPT: "true"}
    return {}
