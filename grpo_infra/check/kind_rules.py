"""What `job.kind` asks of the stack: the target that runs it, the RayCronJob's schedule and its runs,
the RayCluster's lifetime.

Each rule is a configuration a user can get wrong in the stack file and that KubeRay or Kueue would
accept and then run badly (or never); one line each, `check` exits 1.
"""

from __future__ import annotations

from ..k8s import raycronjob
from ..k8s.operators import KUBERAY_VERSION
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.job import MAX_NAME
from .violation import Violation

ENV = ENVIRONMENT_KEY
K8S = f"{ENV}.kubernetes"


def webhook_name_limit(env: Environment) -> int:
    """The name limit of the RayJob-shaped gang the webhook rules read: a RayCluster's own (53), else a
    RayJob's (47; a RayCronJob's runs are RayJobs, their names 11 longer than the RayCronJob's)."""
    return MAX_NAME["raycluster"] if env.job.kind == "raycluster" else MAX_NAME["rayjob"]


def kind_violations(env: Environment) -> list[Violation]:
    """Every rule of `job.kind`, for any target."""
    kind = env.job.kind
    if kind == "rayjob":
        return []
    if env.target != "kubernetes" or env.kubernetes is None:
        return [
            Violation(
                "job-kind-target",
                f"{ENV}.job.kind",
                f"{kind} is a Kubernetes object; a {env.target} stack runs the batch job only (kind: rayjob)",
            )
        ]
    if kind == "raycluster":
        return _cluster_lifetime(env)
    return _cron(env)


def kind_warnings(env: Environment) -> list[Violation]:
    """What the pinned operator does with the kind that the stack file cannot change; never refuses."""
    if env.job.kind != "raycronjob" or env.kubernetes is None:
        return []
    return _tick_names(env)


def _tick_names(env: Environment) -> list[Violation]:
    """KubeRay before v1.7.0 may create two RayJobs for one tick (kuberay#4849); the stack then names each
    run by its tick with a MutatingAdmissionPolicy (`grpo_infra.k8s.raycronjob`), whose v1 API only
    Kubernetes 1.36 serves (MutatingAdmissionPolicy GA, KEP-3962): on an older cluster `pulumi up` cannot
    create it, and the RayCronJob is not created either."""
    if raycronjob.operator_names_runs_by_tick():
        return []
    return [
        Violation(
            "raycronjob-tick-names",
            f"{ENV}.job.kind",
            f"KubeRay {KUBERAY_VERSION} may create two RayJobs for one tick (kuberay#4849): the stack names each run "
            f"of `{env.job.name}` by its tick with a MutatingAdmissionPolicy "
            "(admissionregistration.k8s.io/v1), which needs Kubernetes 1.36 or later; on an older cluster "
            "`pulumi up` stops at that policy",
        )
    ]


def _cluster_lifetime(env: Environment) -> list[Violation]:
    """The lifetime bound is Kueue's, and must leave the cluster time to become Ready at all."""
    assert env.kubernetes is not None
    settings = env.kubernetes.ray_cluster
    seconds = settings.max_execution_seconds()
    where = f"{K8S}.rayCluster.maxExecutionHours"
    if seconds is None:
        return []
    if env.kubernetes.scheduler != "kueue":
        return [
            Violation(
                "raycluster-lifetime",
                where,
                "the lifetime bound is Kueue's maximum execution time; under Volcano nothing would end the "
                "cluster: use Kueue, or say `maxExecutionHours: forever`",
            )
        ]
    # Kueue counts the time from admission; the pods must first be Ready (the image pulled, the gate passed).
    start = env.kubernetes.pods_ready_timeout_minutes * 60 + env.job.preflight.nccl.timeout_seconds
    if seconds <= start:
        return [
            Violation(
                "raycluster-lifetime",
                where,
                f"{seconds} s is not longer than the time the cluster may take to become Ready "
                f"(podsReadyTimeoutMinutes + the gate's timeout = {start} s): Kueue would end it before it is usable",
                f"{start - seconds + 1} s",
            )
        ]
    return []


def _cron(env: Environment) -> list[Violation]:
    """A RayCronJob needs a schedule, Kueue, a concurrency policy KubeRay has, and runs that do train."""
    assert env.kubernetes is not None
    settings = env.kubernetes.ray_cron_job
    if settings is None:
        return [
            Violation(
                "raycronjob-schedule",
                f"{K8S}.rayCronJob",
                "kind raycronjob needs `kubernetes.rayCronJob.schedule` (e.g. `0 2 * * *`)",
            )
        ]
    out = []
    if settings.concurrency_policy != "Allow":
        out.append(
            Violation(
                "raycronjob-concurrency",
                f"{K8S}.rayCronJob.concurrencyPolicy",
                f"{settings.concurrency_policy}: KubeRay's RayCronJob (v1.7.0) has no concurrency policy, every "
                "tick makes a new RayJob; use Allow (Kueue queues an overlapping run until the quota is free)",
            )
        )
    if env.kubernetes.scheduler != "kueue":
        out.append(
            Violation(
                "raycronjob-scheduler",
                f"{K8S}.scheduler",
                "a RayCronJob's runs carry no scheduler labels (KubeRay sets only its own); only Kueue's "
                "default LocalQueue admits them whole: use scheduler kueue",
            )
        )
    if env.job.checkpoint.resume == "auto":
        out.append(
            Violation(
                "raycronjob-resume",
                f"{ENV}.job.checkpoint.resume",
                "every run of a RayCronJob shares the job's checkpoint directory: with resume auto the second run "
                "loads the first run's last step and, past its total steps, trains nothing and succeeds; set disable",
            )
        )
    return out
