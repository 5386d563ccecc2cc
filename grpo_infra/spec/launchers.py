"""The other launch paths of the same job: Ray started by hand, a SkyPilot task, a dstack task.

A stack keeps its scheduler target (Kubernetes or Slurm) and may, in addition, declare any of these
launchers; each renders into its own folder from the same pools and job (docs/launchers.md). Only what
the launcher's own tool needs is typed here; the gang, verl's command line, the port rule, the fabric
gate and the debugger switch come from the rest of the spec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from .base import DnsLabel, SpecModel
from .slurm import PortRange
from .strings import MAX_PATH, visible

Interface = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$")]
AbsolutePath = Annotated[
    str, StringConstraints(pattern=r"^/[^\s'\"$`\\]*$", max_length=MAX_PATH), AfterValidator(visible)
]

# SkyPilot 0.14.1 accepts `resources.infra` as cloud[/region[/zone]] or k8s/kubernetes[/context], the
# clouds from sky/skylet/constants.py ALL_CLOUDS (line 885), matched by sky/utils/schemas.py
# _get_infra_pattern (line 277). The same list here, so `check` refuses what `sky launch` would.
SKYPILOT_CLOUDS = (
    "aws", "azure", "gcp", "ibm", "lambda", "scp", "oci", "runpod", "vast", "vsphere", "cudo", "fluidstack",
    "paperspace", "primeintellect", "do", "nebius", "ssh", "slurm", "hyperbolic", "seeweb", "shadeform", "yotta",
    "mithril", "verda",
)  # fmt: skip
SKYPILOT_INFRA = rf"^(?:(?i:{'|'.join(SKYPILOT_CLOUDS)})(?:/[^/\s]+(?:/[^/\s]+)?)?|(?i:kubernetes|k8s)(?:/\S+)?)$"
# dstack 0.22.5's BackendType (dstack/_internal/core/models/backends/base.py, lines 34-60): the values a
# fleet's `backends` may name.
DstackBackend = Literal[
    "amddevcloud", "aws", "azure", "cloudrift", "crusoe", "cudo", "datacrunch", "daytona", "digitalocean",
    "gcp", "hotaisle", "jarvislabs", "kubernetes", "lambda", "lium", "nebius", "oci", "runpod", "seeweb",
    "tensordock", "vastai", "verda", "vultr",
]  # fmt: skip


# SkyPilot 0.14 bucket sources (docs.skypilot.co/en/v0.14.1/reference/storage.html): s3://, gs://, r2://,
# cos://, oci://, Azure blob https URLs. A bucket is mounted as a file system, so verl reads and writes it
# through a POSIX path (verl 0.9.1 resumes only from `trainer.default_local_dir`).
BucketUrl = Annotated[
    str, StringConstraints(pattern=r"^(?:s3|gs|r2|cos|oci|nebius|cw)://[^\s'\"$`\\]+$|^https://[^\s'\"$`\\]+$")
]
VolumeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=253)]


class SkyPilotStorage(SpecModel):
    """One path of the job on every SkyPilot node: a bucket in `file_mounts`, or a SkyPilot volume.

    SkyPilot 0.14.1 (docs.skypilot.co/en/v0.14.1/reference/storage.html): `MOUNT` streams reads and writes
    each file to the bucket, visible to every node; `MOUNT_CACHED` writes to a local cache first and uploads
    asynchronously (other nodes do not see a write until it is uploaded); `COPY` copies the bucket to each
    node's disk at launch (writes stay on that disk). Volumes (reference/volumes.html): `volumes:` maps a
    path to a volume made by `sky volumes apply` (a PVC on Kubernetes); shared by the nodes only when its
    access mode is ReadWriteMany, which the task cannot show, hence `shared`.
    """

    path: AbsolutePath
    """Where the job sees it on every node, e.g. /checkpoints."""
    source: BucketUrl | None = None
    """A bucket (s3://, gs://, r2://, ...) mounted at `path` through `file_mounts`."""
    mode: Literal["MOUNT", "MOUNT_CACHED", "COPY"] = "MOUNT"
    """How the bucket is attached; only `MOUNT` is one shared file system for a multi-node checkpoint dir."""
    volume: VolumeName | None = None
    """A SkyPilot volume (`sky volumes apply`) mounted at `path` instead of a bucket."""
    shared: bool = False
    """The volume is one file system every node mounts (a ReadWriteMany PVC); buckets: ignored."""

    @model_validator(mode="after")
    def _one_source(self) -> SkyPilotStorage:
        if (self.source is None) == (self.volume is None):
            raise ValueError("name exactly one of `source` (a bucket) or `volume`")
        if self.volume is not None and self.mode != "MOUNT":
            raise ValueError("`mode` describes a bucket; a volume is mounted as it is")
        if self.source is not None and self.shared:
            raise ValueError("`shared` describes a volume; a bucket's sharing follows from `mode`")
        return self

    def shared_by_nodes(self) -> bool:
        """Does every node see every other node's writes here?"""
        return self.mode == "MOUNT" if self.source is not None else self.shared


class DstackStorage(SpecModel):
    """One path of the job in every dstack container: a network volume, or an instance volume.

    dstack 0.22.5 (dstack/_internal/core/models/volumes.py `parse_mount_point`; dstack.ai/docs/concepts/volumes):
    `volumes` entries are `NAME:PATH` (a network volume, a cloud disk attached to one instance at a time, so
    never one file system for several nodes) or `INSTANCE_PATH:PATH` (a directory of the host, e.g. where an
    SSH fleet's hosts mount NFS/Lustre; shared only when every host mounts the same file system there).
    """

    path: AbsolutePath
    """Where the job sees it in the container, e.g. /checkpoints."""
    volume: VolumeName | None = None
    """A dstack network volume (`dstack apply -f volume.dstack.yml`) mounted at `path`."""
    instance_path: AbsolutePath | None = None
    """A directory on the host mounted at `path` (an instance volume)."""
    shared: bool = False
    """`instancePath` is one shared file system every host mounts there (NFS, Lustre, FSx)."""

    @model_validator(mode="after")
    def _one_source(self) -> DstackStorage:
        if (self.volume is None) == (self.instance_path is None):
            raise ValueError("name exactly one of `volume` (a network volume) or `instancePath`")
        if self.volume is not None and self.shared:
            raise ValueError("`shared` describes an `instancePath`; a network volume attaches to one instance")
        return self

    def shared_by_nodes(self) -> bool:
        """Does every node see every other node's writes here?"""
        return self.instance_path is not None and self.shared


def default_cloud_ports() -> PortRange:
    """One block of ports below the kernel's ephemeral range: cloud machines run one cluster each."""
    return PortRange.model_validate({"start": 20000, "end": 20255})


def _one_mount_per_path(storage: list[Any]) -> list[Any]:
    """Each `path` once: SkyPilot's file_mounts is a mapping, so a second entry at a path silently replaces the
    first (the model or the checkpoints would come from somewhere else); a container runtime refuses a duplicate
    mount point only when the task starts, long after `check` said yes."""
    paths = [entry.path for entry in storage]
    twice = next((p for p in paths if paths.count(p) > 1), None)
    if twice is not None:
        raise ValueError(f"path {twice} is mounted twice; give each storage entry its own path")
    return storage


class RayLauncher(SpecModel):
    """Ray started by hand on machines you can SSH to: `head.sh`, `worker.sh`, `submit.sh`."""

    interface: Interface = Field(description="Network interface whose IPv4 address Ray and NCCL bind to.")
    ray_ports: PortRange = Field(
        description="Ports Ray may use; each run (GRPO_RUN_ID) takes its own block of it, so several clusters "
        "can share machines."
    )
    working_dir: AbsolutePath | None = Field(
        default=None,
        description="Directory `submit.sh` uploads as the job's working directory (runtime_env working_dir); "
        "none when omitted. GRPO_WORKING_DIR overrides it at submit time.",
    )


class SkyPilotLauncher(SpecModel):
    """A SkyPilot task: SkyPilot provisions the nodes (a cloud, or SkyPilot on Kubernetes)."""

    infra: Annotated[str, StringConstraints(pattern=SKYPILOT_INFRA)] = Field(
        description="SkyPilot's `resources.infra`: a cloud with optional region and zone (gcp/us-central1), "
        "or k8s[/context] for SkyPilot on Kubernetes."
    )
    accelerator: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = Field(
        description="SkyPilot's accelerator name for the pool's GPU (`sky show-gpus`), e.g. H100."
    )
    use_spot: bool = False
    """Spot/preemptible nodes: cheaper, and the run resumes from `checkpoint.dir` after a preemption."""
    disk_size_gb: Annotated[int, Field(ge=50, le=65536)] | None = None
    """Boot disk per node, GB; SkyPilot's default when omitted."""
    interface: Interface | None = Field(
        default=None,
        description="Interface for NCCL/Gloo sockets when the pool's fabric names none; Ray binds to the "
        "address SkyPilot lists for the node (SKYPILOT_NODE_IPS).",
    )
    ray_ports: PortRange = Field(default_factory=default_cloud_ports, description="Ports the job's Ray uses.")
    expose_dashboard: bool = Field(
        default=False,
        description="List the dashboard port in `resources.ports`, which opens it to the internet on clouds; "
        "off: reach it through `ssh -L` to the head.",
    )
    storage: list[SkyPilotStorage] = Field(
        default_factory=list,
        description="Where the model, the data and the checkpoint directory come from on the nodes; `check` "
        "refuses a job path under none, and a multi-node checkpoint dir not shared by every node.",
    )

    @field_validator("storage")
    @classmethod
    def _storage_paths_differ(cls, storage: list[SkyPilotStorage]) -> list[SkyPilotStorage]:
        return _one_mount_per_path(storage)


HostName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$|^[0-9A-Fa-f:]{2,39}$")
]
SshUser = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]
KeyPath = Annotated[str, StringConstraints(pattern=r"^~?/[^\s'\"$`\\]*$", max_length=MAX_PATH), AfterValidator(visible)]


class DstackSsh(SpecModel):
    """The hosts of an SSH fleet: machines you run and set up (drivers, the shared file system), which
    dstack reaches over SSH (dstack 0.22.5 `SSHParams` in dstack/_internal/core/models/fleets.py:
    `ssh_config.user`, `identity_file`, `hosts`). The private key stays a path on the machine running
    `dstack apply`; its contents never enter the stack or the rendered files."""

    user: SshUser
    """The login on every host."""
    identity_file: KeyPath
    """The private key's path on the machine running `dstack apply` (absolute or `~/...`)."""
    hosts: Annotated[list[HostName], Field(min_length=1, max_length=1024)]
    """The fleet's hosts (names or addresses), each once."""

    @field_validator("hosts")
    @classmethod
    def _hosts_once(cls, hosts: list[str]) -> list[str]:
        twice = next((h for h in hosts if hosts.count(h) > 1), None)
        if twice is not None:
            raise ValueError(f"host {twice} is listed twice")
        return hosts


class DstackFleet(SpecModel):
    """The dstack fleet the task runs on, rendered as its own configuration: a cloud fleet (dstack
    provisions its hosts from `backends`) or, with `ssh`, an SSH fleet of hosts you run."""

    name: DnsLabel
    """Fleet name; the task asks for this fleet."""
    backends: list[DstackBackend] | None = None
    """Cloud fleet: the dstack backends it may provision from; all configured ones when omitted."""
    ssh: DstackSsh | None = None
    """SSH fleet: the hosts you run (their own file systems, e.g. FSx or NFS mounts, are there for the task)."""
    placement: Literal["any", "cluster"] = "cluster"
    """`cluster`: nodes on one interconnected network (what a multi-node gang needs)."""

    @model_validator(mode="after")
    def _cloud_or_ssh(self) -> DstackFleet:
        if self.ssh is not None and self.backends is not None:
            raise ValueError("`backends` describes a cloud fleet and `ssh` an SSH fleet: name one of them")
        return self

    def provisioned_by_dstack(self) -> bool:
        """A cloud fleet: dstack creates the hosts from its backends' images, so nothing of yours is on them."""
        return self.ssh is None


class DstackLauncher(SpecModel):
    """A dstack task (and fleet): dstack provisions the nodes."""

    gpu_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")] = Field(
        description="dstack's GPU name for the pool's GPU (e.g. H100); the count is the pool's `gpu.perNode`."
    )
    shm_size_gib: Annotated[int, Field(ge=1, le=65536)] | None = None
    """/dev/shm of the task's container, GiB (NCCL and the rollout engine share tensors through it)."""
    interface: Interface | None = Field(
        default=None,
        description="Interface for NCCL/Gloo sockets when the pool's fabric names none; Ray binds to the "
        "address dstack lists for the node (DSTACK_NODES_IPS).",
    )
    ray_ports: PortRange = Field(default_factory=default_cloud_ports, description="Ports the job's Ray uses.")
    fleet: DstackFleet | None = None
    """The fleet to render alongside the task; the task runs on any matching fleet when omitted."""
    storage: list[DstackStorage] = Field(
        default_factory=list,
        description="Where the model, the data and the checkpoint directory come from in the container; "
        "`check` refuses a job path under none, and a multi-node checkpoint dir not shared by every node.",
    )

    @field_validator("storage")
    @classmethod
    def _storage_paths_differ(cls, storage: list[DstackStorage]) -> list[DstackStorage]:
        return _one_mount_per_path(storage)


class Launchers(SpecModel):
    """Launch paths rendered next to the stack's scheduler target, each into `DIR/STACK/<launcher>/`."""

    ray: RayLauncher | None = None
    skypilot: SkyPilotLauncher | None = None
    dstack: DstackLauncher | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> Launchers:
        if self.ray is None and self.skypilot is None and self.dstack is None:
            raise ValueError("name at least one launcher: `ray`, `skypilot` or `dstack`")
        return self

    def declared(self) -> list[str]:
        """The launchers this stack renders, in a fixed order."""
        return [name for name in ("ray", "skypilot", "dstack") if getattr(self, name) is not None]
