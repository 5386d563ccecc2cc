"""Kubernetes target settings: where the cluster comes from and how gangs are admitted."""

from __future__ import annotations

import re
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, StringConstraints, field_validator, model_validator

from .base import DnsLabel, PositiveInt, ResourceName, SpecModel
from .job import NfsExport
from .pools import LabelKey, LabelValue
from .strings import AbsolutePath


class NodeReserve(SpecModel):
    """What each node keeps back beyond what the project computes (docs/kubernetes.md, "What a node gives").

    On EKS and GKE the kubelet's reservation and eviction threshold follow the provider's published rules
    and the stack's own DaemonSets are subtracted too; this reserve covers the rest: the cluster's own
    DaemonSets (kube-proxy, the CNI, logging agents) and the memory the kernel keeps. On an existing
    cluster it is the whole stated reserve, the kubelet's included. The worker pod asks for what is left.
    """

    cpus: Annotated[float, Field(ge=0)]
    """CPUs kept back on every node."""
    memory_gib: Annotated[float, Field(ge=0)]
    """GiB of memory kept back on every node."""


# Volume names the RayJob's pods already use (/dev/shm, the checkpoint volume, the gate's code, the image
# guard's program: grpo_infra/k8s/gate.py, grpo_infra/image/pods.py).
RESERVED_VOLUMES = frozenset({"dshm", "checkpoints", "grpo-infra-gate", "image-guard"})
MountPath = Annotated[str, StringConstraints(pattern=r"^/[^\s:,]*[^/\s:,]$|^/$")]


class Volume(SpecModel):
    """A shared volume mounted at the same path on the Ray head and every worker: models, data, caches.

    Exactly one source: a PersistentVolumeClaim in the tenant's namespace (a ReadWriteMany claim on
    FSx for Lustre, Filestore or NFS), an NFS export, or a host path every node already mounts.
    """

    name: DnsLabel
    """Volume name in the pods."""
    mount_path: MountPath
    """Where the head and the workers see it."""
    read_only: bool = True
    """Mount read-only (models and data are read, never written)."""
    claim_name: (
        Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)] | None
    ) = None
    """A PersistentVolumeClaim in the tenant's namespace (ReadWriteMany or ReadOnlyMany)."""
    nfs: NfsExport | None = None
    host_path: AbsolutePath | None = Field(
        default=None, description="A shared file system already mounted at this path on every node."
    )

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        given = [k for k in ("claim_name", "nfs", "host_path") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"volume {self.name}: give exactly one of `claimName`, `nfs` {{server, path}} or `hostPath`"
            )
        return self


InterfaceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$", max_length=15)]


class PodNetwork(SpecModel):
    """Which network the worker pods' NCCL and Gloo sockets use.

    `pod`: the pod's own interface (`eth0`). `secondary`: a Multus attachment, whose interface the pod
    sees as `interface` (Multus names the first one `net1`). `host`: the workers run with
    `hostNetwork: true` and use the pool's `fabric.interfaces`; their Ray ports then live on the host
    and come from a per-job block starting at `hostPortStart`.
    """

    mode: Literal["pod", "secondary", "host"] = "pod"
    """`pod`, `secondary` (Multus) or `host` (hostNetwork)."""
    interface: InterfaceName | None = Field(
        default=None, description="The socket interface inside the pod: `eth0` for `pod`, `net1` for `secondary`."
    )
    attachment: Annotated[str, StringConstraints(pattern=r"^([a-z0-9-]+/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] | None = (
        Field(default=None, description="`secondary`: the NetworkAttachmentDefinition (`[namespace/]name`).")
    )
    host_port_start: Annotated[int, Field(ge=1024, le=65280)] | None = Field(
        default=None, description="`host`: first port of the job's Ray port block on the host."
    )

    @model_validator(mode="after")
    def _mode_fields(self) -> PodNetwork:
        if (self.mode == "secondary") != (self.attachment is not None):
            raise ValueError(
                "`attachment` (the Multus NetworkAttachmentDefinition) goes with mode secondary, and only there"
            )
        if (self.mode == "host") != (self.host_port_start is not None):
            raise ValueError(
                "`hostPortStart` (the job's Ray port block on the host) goes with mode host, and only there"
            )
        if self.mode == "host" and self.interface is not None:
            raise ValueError("mode host uses the pool's `fabric.interfaces`; `interface` is for pod networks")
        return self

    def socket_interface(self) -> str | None:
        """The interface name inside the pod; None for host networking (the pool's interfaces then)."""
        if self.mode == "host":
            return None
        return self.interface or ("eth0" if self.mode == "pod" else "net1")


class HeadEksNodes(SpecModel):
    """The EKS node group of the head pool."""

    instance_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+[a-z0-9-]*\.[a-z0-9]+$")]
    """EC2 instance type, e.g. m7i.8xlarge."""
    subnet_ids: list[Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]+$")]] = Field(min_length=1)
    """Subnets of the node group."""
    node_role_arn: Annotated[str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$")]
    """IAM role the nodes run as."""
    max_pods: Annotated[int, Field(ge=1, le=1000)] | None = None
    """The kubelet's maxPods when the instance type is not in the project's table."""


class HeadGkeNodes(SpecModel):
    """The GKE node pool of the head pool."""

    machine_type: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    """GCE machine type, e.g. n2-standard-16."""
    zone: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z0-9]+-[a-z]$")]
    """Zone of the node pool (the GPU pool's, so the head is near its workers)."""
    auto_upgrade: bool = False
    """Let GKE upgrade (drain) these nodes; the head's loss ends the run."""


class HeadPool(SpecModel):
    """CPU nodes for the Ray head and the job's submitter: the GPU pools are tainted and filled by workers.

    On EKS and GKE the stack creates them (`eks` or `gke`); on an existing cluster they are existing
    nodes that already carry `labels`.
    """

    name: DnsLabel = "ray-head"
    """Node group / node pool name."""
    nodes: PositiveInt = 1
    """How many head nodes."""
    cpus: Annotated[int, Field(ge=1, le=4096)]
    """CPUs per node."""
    memory_gib: Annotated[int, Field(ge=1, le=65536)]
    """Memory per node, GiB."""
    labels: dict[LabelKey, LabelValue] = Field(min_length=1)
    """Node labels: what the head and submitter select and the `ray-head` flavor matches."""
    eks: HeadEksNodes | None = None
    gke: HeadGkeNodes | None = None


class Topology(SpecModel):
    """Node label keys for topology-aware scheduling, coarsest first."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = "gpu-topology"
    """Name of the Kueue Topology object."""
    levels: list[LabelKey] = Field(min_length=1, max_length=16)
    """Node label keys, coarsest first; `kubernetes.io/hostname` may only be last."""

    @field_validator("levels")
    @classmethod
    def _ordered(cls, levels: list[str]) -> list[str]:
        if len(levels) != len(set(levels)):
            raise ValueError("topology levels must be unique")
        if "kubernetes.io/hostname" in levels[:-1]:
            raise ValueError("kubernetes.io/hostname may only be the last (finest) level")
        return levels


# The Ray release this project pins and tests against (`ray[default]==2.60.0` in pyproject.toml).
RAY_VERSION = "2.60.0"
# KubeRay (>= 1.5.1) rejects `authOptions.mode: token` when `rayVersion` is older: Ray's token
# authentication first shipped in 2.52.0.
TOKEN_AUTH_MIN_RAY = "2.52.0"


class NodeLoss(SpecModel):
    """Timeouts that turn a lost or wedged node into a failed attempt in minutes, not a hung gang.

    NCCL cannot take a replacement rank mid-run, so the whole attempt must end: Ray's GCS declares a node
    dead after `detectSeconds` without answers to its health checks (the actors on it die, verl's driver
    fails, the RayJob fails and KubeRay starts a new Ray cluster), and the kubelet restarts a Ray container
    whose raylet has been unhealthy for `livenessSeconds` instead of leaving it holding the GPUs.
    """

    detect_seconds: Annotated[int, Field(ge=10, le=600)] = Field(
        default=60,
        description="Ray's GCS marks a silent node dead after this long: health checks every 5 s "
        "(`RAY_health_check_period_ms`, each waiting 5 s), `detectSeconds / 5` missed in a row "
        "(`RAY_health_check_failure_threshold`). Ray's own default is about 20-55 s. The submitter's "
        "liveness probe of the head's GCS fails the attempt after the same window (a lost head).",
    )
    liveness_seconds: Annotated[int, Field(ge=30, le=3600)] = Field(
        default=300,
        description="The kubelet restarts a Ray container whose node health endpoint (`/api/healthz` on the "
        "dashboard agent: raylet, plus GCS on the head) has failed this long; KubeRay's default is 600 s.",
    )

    @model_validator(mode="after")
    def _whole_periods(self) -> NodeLoss:
        for name, value in (("detectSeconds", self.detect_seconds), ("livenessSeconds", self.liveness_seconds)):
            if value % 5:
                raise ValueError(f"nodeLoss.{name} must be a multiple of 5 (the health-check period), got {value}")
        return self


PriorityName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


class RayJobSettings(SpecModel):
    """How the GRPO RayJob is sized around its GPU workers, and how long Kubernetes keeps it."""

    head_cpus: Annotated[float, Field(gt=0, le=256)] = Field(
        default=8, description="CPUs of the Ray head (a CPU pod off the GPU pool; runs verl's driver)."
    )
    head_memory_gib: Annotated[float, Field(gt=0, le=4096)] = 32
    """Memory of the Ray head pod, GiB."""
    priority_class: PriorityName = Field(
        default="grpo-normal", description="Kueue WorkloadPriorityClass; one of `priorityClasses`."
    )
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] = Field(
        default=30,
        description="Seconds KubeRay keeps the finished job's Ray cluster (all its GPU pods) before deleting it. "
        "Kueue releases the quota as soon as the job finishes, so `check` refuses more than 60 under Kueue; "
        "the driver's log stays in the submitter pod (docs/kubernetes.md).",
    )
    active_deadline_seconds: Annotated[int, Field(ge=60)] | None = Field(
        default=7 * 24 * 3600, description="Fail the job after this long running; no limit when null."
    )
    backoff_limit: Annotated[int, Field(ge=0, le=10)] = Field(
        default=3,
        description="New Ray clusters KubeRay may start after a failure (a lost node, a failed gate); each resumes "
        "from the newest checkpoint. Not spent on a Kueue eviction or on `activeDeadlineSeconds`.",
    )
    node_loss: NodeLoss = Field(default_factory=NodeLoss)
    """How fast a lost or wedged Ray node ends the attempt (docs/kubernetes.md, "When a node is lost")."""
    ray_version: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+\.\d+$")] | None = Field(
        default=None,
        description="Leave unset: `rayClusterSpec.rayVersion` is `image.contents.ray`. When set, `check` refuses "
        f"it unless it equals the image's Ray; KubeRay accepts `rayAuth: token` only from {TOKEN_AUTH_MIN_RAY}.",
    )
    ray_auth: Literal["token", "disabled"] = Field(
        default="token",
        description="`token`: KubeRay generates a Secret and every Ray pod and the submitter authenticate with it "
        "(dashboard, job API and GCS require it); `disabled`: anyone who reaches the pods can submit code.",
    )

    @model_validator(mode="after")
    def _token_auth_needs_ray(self) -> RayJobSettings:
        if (
            self.ray_version is not None
            and self.ray_auth == "token"
            and _release(self.ray_version) < _release(TOKEN_AUTH_MIN_RAY)
        ):
            raise ValueError(
                f"rayAuth: token needs Ray >= {TOKEN_AUTH_MIN_RAY} in the image, but rayVersion is "
                f"{self.ray_version}; use a newer image (and set rayVersion to its Ray) or set rayAuth: disabled"
            )
        return self


# A bound a stack states on purpose: `maxExecutionHours: forever` (Kueue then never deactivates the cluster).
FOREVER = "forever"
# Kueue's maximum execution time counts whole seconds, > 0 (Kueue v0.19.2 pkg/controller/jobframework/validation.go
# `validateCreateForMaxExecTime`).
DEFAULT_CLUSTER_HOURS = 24


class RayClusterSettings(SpecModel):
    """`job.kind: raycluster`: how long the admitted cluster may hold its GPUs.

    Kueue deactivates the cluster's workload once it has been admitted this long (label
    `kueue.x-k8s.io/max-exec-time-seconds`, Kueue v0.19.2 pkg/controller/constants/constants.go and
    pkg/controller/core/workload_controller.go `reconcileMaxExecutionTime`): the RayCluster is suspended, its
    pods are deleted and the quota is free. An idle cluster never holds GPUs over a weekend by default.
    """

    max_execution_hours: Annotated[float, Field(gt=0, le=24 * 366)] | Literal["forever"] = Field(
        default=DEFAULT_CLUSTER_HOURS,
        description="Hours the admitted cluster may run before Kueue deactivates it (24 by default); "
        "`forever` only when said so.",
    )

    def max_execution_seconds(self) -> int | None:
        """The Kueue label's value; None for `forever`."""
        if self.max_execution_hours == FOREVER:
            return None
        return max(1, round(float(self.max_execution_hours) * 3600))


# `@every <duration>` or the five-field form robfig/cron's ParseStandard accepts (KubeRay v1.7.0
# controllers/ray/utils/validation.go `ValidateRayCronJobSpec`): minute hour day-of-month month day-of-week.
CRON_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_EVERY = re.compile(r"^@every ([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")


def _cron_value(text: str, index: int) -> int | None:
    """A number or (months, days) a name of field `index`; None when it is neither."""
    names = _MONTHS if index == 3 else _DAYS if index == 4 else ()
    if text.lower() in names:
        return names.index(text.lower()) + (1 if index == 3 else 0)
    return int(text) if text.isdigit() else None


def _cron_field_problem(value: str, index: int) -> str | None:
    low, high = _CRON_RANGES[index]
    for part in value.split(","):
        base, _, step = part.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            return f"{part!r}: the step must be a positive number"
        if base in ("*", "?"):
            continue
        for bound in base.split("-", 1):
            number = _cron_value(bound, index)
            if number is None or not low <= number <= high:
                return f"{part!r} is outside {low}-{high}"
    return None


def cron_problem(schedule: str) -> str | None:
    """Why robfig/cron's standard parser would refuse `schedule`, or None (a `TZ=` prefix is refused by
    KubeRay itself: the time zone is `timeZone`)."""
    text = schedule.strip()
    if "TZ" in text:
        return "the time zone goes in `timeZone`, not in the schedule (KubeRay refuses TZ= in it)"
    if text in CRON_DESCRIPTORS or _EVERY.match(text):
        return None
    fields = text.split()
    if len(fields) != 5:
        return (
            f"{len(fields)} fields; a schedule has 5 (minute hour day-of-month month day-of-week) or is a @descriptor"
        )
    for index, value in enumerate(fields):
        problem = _cron_field_problem(value, index)
        if problem:
            return f"field {index + 1}: {problem}"
    return None


class RayCronJobSettings(SpecModel):
    """`job.kind: raycronjob`: when a run starts and what happens when the previous one still runs.

    KubeRay's RayCronJob (v1.6+, alpha: the operator's `RayCronJob` feature gate) creates one RayJob per tick
    and has no concurrency policy: every tick makes a new RayJob (KubeRay v1.7.0
    controllers/ray/raycronjob_controller.go). Under Kueue that run queues behind the running one and is
    admitted whole when the quota is free: `Allow`. `Forbid` and `Replace` are refused by `check`.
    """

    schedule: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    """Cron schedule, five fields (`0 2 * * *`) or `@daily`, `@every 6h`."""
    time_zone: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        default=None, description="IANA time zone of the schedule (`Europe/Paris`); the operator's own when omitted."
    )
    concurrency_policy: Literal["Allow", "Forbid", "Replace"] = Field(
        default="Allow",
        description="A tick while the previous run is still running: `Allow` queues the new run in Kueue until "
        "the quota is free (what KubeRay supports); `Forbid`/`Replace` are refused by `check`.",
    )
    suspend: bool = False
    """Stop creating runs (runs already created go on)."""

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str) -> str:
        problem = cron_problem(schedule)
        if problem:
            raise ValueError(f"schedule {schedule!r}: {problem}")
        return schedule

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, zone: str | None) -> str | None:
        if zone is None:
            return zone
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timeZone {zone!r} is not an IANA time zone") from None
        return zone


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _default_priority_classes() -> dict[str, int]:
    return {"grpo-high": 10000, "grpo-normal": 1000, "grpo-low": 100}


class Kubernetes(SpecModel):
    """A Kubernetes cluster that runs the gang through KubeRay and Kueue (or Volcano)."""

    provider: Literal["eks", "gke", "existing"]
    """Where the nodes come from: an EKS node group, a GKE node pool, or existing nodes labelled and tainted by the stack."""
    cluster_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    """The existing cluster the stack deploys into."""
    scheduler: Literal["kueue", "volcano"] = "kueue"
    """Gang admission: Kueue (suspend until the whole gang fits) or Volcano."""
    operator_charts: Literal["upstream", "bundled"] = Field(
        default="upstream",
        description="Where the operators' Helm charts come from: `upstream` (KubeRay's Helm repository, Kueue's OCI "
        "registry) or `bundled` (the project's copies of the same chart versions, for clusters that reach neither).",
    )
    node_reserve: NodeReserve
    topology: Topology | None = None
    pods_ready_timeout_minutes: Annotated[int, Field(ge=5, le=1440)] = Field(
        default=45,
        description="Kueue evicts and requeues a gang whose pods are not all ready by then; covers pulling a "
        "multi-GB verl image onto every node.",
    )
    node_replacement_minutes: Annotated[int, Field(ge=0, le=1440)] = Field(
        default=10,
        description="How long the cluster takes to give a lost GPU node's place to a new node that is Ready "
        "(EKS/GKE node groups: an estimate of 5-10 minutes, measure yours; `existing`: however long someone "
        "takes). With `imagePullMinutes` it is the floor of `recoveryTimeoutMinutes`.",
    )
    image_pull_minutes: Annotated[int, Field(ge=0, le=1440)] = Field(
        default=10,
        description="How long a new node takes to pull the job image (the verl images are ~20 GB); with "
        "`nodeReplacementMinutes` it is the floor of `recoveryTimeoutMinutes`.",
    )
    recovery_timeout_minutes: Annotated[int, Field(ge=1, le=1440)] | None = Field(
        default=None,
        description="Kueue `waitForPodsReady.recoveryTimeout`: a gang that ran and is not ready again this long (a "
        "retry's new Ray cluster waiting for a lost node's replacement) is evicted whole and requeued. Default "
        "and floor: `nodeReplacementMinutes` + `imagePullMinutes` (shorter would evict a retry that was about to "
        "get its node); Kueue's own default is `podsReadyTimeoutMinutes`.",
    )
    block_admission: bool = Field(
        default=True,
        description="Kueue `waitForPodsReady.blockAdmission`: admit no other gang, of any tenant, until the "
        "admitted one's pods are all ready (cluster-wide; see docs/kubernetes.md for the trade-off).",
    )
    volumes: list[Volume] = Field(default_factory=list)
    """Shared volumes mounted on the head and every worker: where `job.modelPath` and `job.data` live."""
    network: PodNetwork = Field(default_factory=PodNetwork)
    head_pool: HeadPool | None = None
    provided_resources: list[ResourceName] = Field(
        default_factory=list,
        description="Extended resources the cluster's own device plugins already advertise (e.g. nvidia.com/gpu, "
        "rdma/roce on an existing cluster); the stack installs the plugins for the others.",
    )
    pod_security: Literal["restricted", "baseline", "privileged"] | None = Field(
        default=None,
        description="Pod Security level to enforce on the tenant namespaces; default: the strictest the job's "
        "pods pass. `check` refuses a level the pods do not pass.",
    )
    priority_classes: dict[PriorityName, Annotated[int, Field(ge=-2147483648, le=1000000000)]] = Field(
        default_factory=_default_priority_classes, description="Kueue WorkloadPriorityClasses: name → value."
    )
    ray_job: RayJobSettings = Field(default_factory=RayJobSettings)
    ray_cluster: RayClusterSettings = Field(default_factory=RayClusterSettings)
    """`job.kind: raycluster`: the cluster's bounded lifetime."""
    ray_cron_job: RayCronJobSettings | None = None
    """`job.kind: raycronjob`: the schedule; required for that kind."""
    monitoring_namespace: DnsLabel | None = Field(
        default=None,
        description="Namespace whose pods (Prometheus) may scrape the Ray pods' metrics port (8080; under "
        "`network.mode: host` also the workers' port of the job's block) through the job's NetworkPolicy, "
        "and no other port; none when omitted.",
    )

    @model_validator(mode="after")
    def _head_pool_fits_provider(self) -> Kubernetes:
        """EKS and GKE clusters get a head pool from the stack: nothing else gives the head an untainted node."""
        head = self.head_pool
        if self.provider in ("eks", "gke") and (head is None or getattr(head, self.provider) is None):
            raise ValueError(
                f"an {self.provider} cluster needs `headPool` with an `{self.provider}` block: the GPU nodes are "
                "tainted and full, so the Ray head and the submitter need CPU nodes of their own"
            )
        for cloud in ("eks", "gke"):
            if head is not None and cloud != self.provider and getattr(head, cloud) is not None:
                raise ValueError(f"headPool.{cloud} is only for an {cloud} cluster, this one is {self.provider}")
        names = [v.name for v in self.volumes]
        taken = sorted(set(names) & RESERVED_VOLUMES)
        if taken:
            raise ValueError(f"volumes: {taken[0]} is a volume the project mounts itself; choose another name")
        paths = [v.mount_path for v in self.volumes]
        for what, values in (("name", names), ("mountPath", paths)):
            dupes = sorted({n for n in values if values.count(n) > 1})
            if dupes:
                raise ValueError(f"volumes: {what} {dupes[0]} is used twice")
        return self

    def recovery_floor_minutes(self) -> int:
        """The least a retry needs to get a lost node back: the node replaced, then the image pulled on it."""
        return self.node_replacement_minutes + self.image_pull_minutes

    def recovery_timeout(self) -> int:
        """`recoveryTimeoutMinutes`, or its floor when the stack sets none."""
        return self.recovery_floor_minutes() if self.recovery_timeout_minutes is None else self.recovery_timeout_minutes

    @model_validator(mode="after")
    def _recovery_covers_a_replacement(self) -> Kubernetes:
        floor = self.recovery_floor_minutes()
        if self.recovery_timeout_minutes is not None and self.recovery_timeout_minutes < floor:
            raise ValueError(
                f"recoveryTimeoutMinutes {self.recovery_timeout_minutes} is shorter than nodeReplacementMinutes "
                f"+ imagePullMinutes ({floor}): Kueue would evict a retry before its replacement node could be "
                "ready; raise it or leave it unset"
            )
        return self

    @model_validator(mode="after")
    def _known_priority_class(self) -> Kubernetes:
        if self.ray_job.priority_class not in self.priority_classes:
            known = ", ".join(sorted(self.priority_classes)) or "none"
            raise ValueError(
                f"rayJob.priorityClass {self.ray_job.priority_class!r} is not in priorityClasses ({known})"
            )
        return self
