"""What `job.kind` asks of the stack: the target that runs it, the RayCronJob's schedule and its runs,
the RayCluster's lifetime.

Each rule is a configuration a user can get wrong in the stack file and that KubeRay or Kueue would
accept and then run badly (or never); one line each, `check` exits 1.
"""

from __future__ import annotations

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
    return _duplicate_runs(env)


def _duplicate_runs(env: Environment) -> list[Violation]:
    """KubeRay before v1.7.0 names each run `<name>-<5 random chars>` and reconciles the RayCronJob again as
    soon as the run exists (`Owns(&RayJob{})`), from a cache that may not hold the new `lastScheduleTime`
    yet: that pass creates a second RayJob for the same tick (v1.6.2 controllers/ray/raycronjob_controller.go
    `Reconcile`, `constructRayJob`; kuberay#4849). v1.7.0 names runs by the tick and takes `AlreadyExists` as
    done (kuberay#4888). Seen on the local cluster (tests/kube/test_kinds.py)."""
    major, minor, *_ = (int(part) for part in KUBERAY_VERSION.split("."))
    if (major, minor) >= (1, 7):
        return []
    return [
        Violation(
            "raycronjob-duplicate-runs",
            f"{ENV}.job.kind",
            f"KubeRay {KUBERAY_VERSION} may create two RayJobs for one tick (kuberay#4849, fixed in 1.7.0): Kueue "
            "admits one, the other waits for the quota and then runs the same work again; delete the suspended run "
            f"of `{env.job.name}` whose `ray.io/cronjob-scheduled-timestamp` an admitted run already has",
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
