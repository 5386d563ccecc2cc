"""Slurm target settings, in slurm.conf's own vocabulary."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from ..ports import MIN_BLOCK_SIZE, block_count
from .base import DnsLabel, SpecModel
from .strings import MAX_PATH, Hostlist, Location, visible

_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<h>\d+):(?P<m>\d{2}):(?P<s>\d{2})$")


def time_limit_minutes(value: str) -> int:
    """Minutes of a Slurm `D-HH:MM:SS` / `HH:MM:SS` time limit, rounded up as Slurm does."""
    match = _TIME.match(value)
    if match is None:
        raise ValueError(f"not a Slurm time limit such as 2-00:00:00 or 12:00:00: {value!r}")
    days = int(match["d"] or 0)
    seconds = ((days * 24 + int(match["h"])) * 60 + int(match["m"])) * 60 + int(match["s"])
    if int(match["m"]) > 59 or int(match["s"]) > 59:
        raise ValueError(f"minutes and seconds must be below 60: {value!r}")
    return -(-seconds // 60)


SlurmTime = Annotated[str, StringConstraints(pattern=_TIME.pattern)]
AbsolutePath = Annotated[
    str, StringConstraints(pattern=r"^/[^:,\s'\"$`\\]*$", max_length=MAX_PATH), AfterValidator(visible)
]
# GRES names (GresTypes) and TRES names (AccountingStorageTRES, e.g. gres/gpu), as slurm.conf spells them.
GresName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
TresName = Annotated[str, StringConstraints(pattern=r"^[a-z]+(/[A-Za-z0-9_:.-]+)?$")]


class PortRange(SpecModel):
    """Ports this cluster lets Ray use; each job takes its own block inside it."""

    start: Annotated[int, Field(ge=1024, le=65535)]
    """First port of the range."""
    end: Annotated[int, Field(ge=1024, le=65535)]
    """Last port of the range (inclusive)."""

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.end <= self.start:
            raise ValueError(f"`end` ({self.end}) must be above `start` ({self.start})")
        return self


class Container(SpecModel):
    """How the job's processes get the verl image."""

    runtime: Literal["none", "pyxis", "apptainer"]
    """`none`, Pyxis/Enroot (`srun --container-image`) or Apptainer (`apptainer exec --nv`)."""
    image: Location | None = Field(
        default=None,
        description="The stack's image (`image`) in this runtime's own form: an enroot squashfs or URI for pyxis, "
        "a .sif for Apptainer; `image.ref` is pulled when omitted.",
    )
    mounts: list[
        Annotated[
            str,
            StringConstraints(pattern=r"^/[^:,\s]*(:/[^:,\s]*)?$", max_length=2 * MAX_PATH + 1),
            AfterValidator(visible),
        ]
    ] = Field(default_factory=list)
    """`/host/path:/container/path` bind mounts."""
    workdir: AbsolutePath | None = Field(
        default=None,
        description="Directory the job's commands start in, inside the image (pyxis --container-workdir, "
        "Apptainer --pwd); it must exist there. Default /tmp.",
    )

    @model_validator(mode="after")
    def _image_when_needed(self) -> Container:
        if self.runtime == "none" and (self.image or self.mounts or self.workdir):
            raise ValueError("container runtime `none` takes no `image`, `mounts` or `workdir`")
        return self

    def binds(self) -> list[tuple[str, str]]:
        """Each mount as (host path, path inside the image); `/a` alone binds /a at /a."""
        pairs = [m.split(":", 1) if ":" in m else [m, m] for m in self.mounts]
        return [(host, inside) for host, inside in pairs]


class Gres(SpecModel):
    """How slurmd finds the GPUs: NVML autodetection or explicit device files. Exactly one."""

    autodetect: Literal["nvml"] | None = None
    """`nvml`: slurmd finds the GPUs itself."""
    files: Annotated[str, StringConstraints(pattern=r"^/\S+$", max_length=MAX_PATH), AfterValidator(visible)] | None = (
        Field(
            default=None,
            description="Device files as a hostlist-style pattern, e.g. /dev/nvidia[0-7]: the widest pool's GPUs; "
            "a pool with fewer per node gets the first `gpu.perNode` of them.",
        )
    )

    @model_validator(mode="after")
    def _one_source(self) -> Gres:
        if (self.autodetect is None) == (self.files is None):
            raise ValueError("give exactly one of `autodetect: nvml` or `files` (e.g. /dev/nvidia[0-7])")
        return self


class SlurmDeploy(SpecModel):
    """Where the Pulumi component places the rendered files: the controller or a shared file system."""

    directory: Annotated[str, StringConstraints(pattern=r"^/[^\s'\"$`\\]*[^/\s'\"$`\\]$")] = Field(
        description="Absolute directory the files go to, e.g. /etc/slurm/grpo (slurm.conf includes it)."
    )
    host: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*$")] | None = Field(
        default=None, description="Reach the directory over SSH on this host; local when omitted."
    )
    user: Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]*$")] | None = None
    """SSH user on `host`."""
    reconfigure: bool = Field(default=False, description="Run `scontrol reconfigure` after a change.")

    @model_validator(mode="after")
    def _user_needs_host(self) -> SlurmDeploy:
        if self.user is not None and self.host is None:
            raise ValueError("`user` is the SSH user: give the `host` too, or drop `user` for a local directory")
        return self


class Switch(SpecModel):
    """One switch of the fabric tree (topology/tree): a leaf lists its nodes, a spine its switches."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")]
    """Switch name in topology.conf."""
    nodes: Hostlist | None = Field(default=None, description="Hostlist of the nodes cabled to this leaf switch.")
    switches: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")]] | None = None
    """Switches below this one (a spine)."""

    @model_validator(mode="after")
    def _leaf_or_spine(self) -> Switch:
        if (self.nodes is None) == (not self.switches):
            raise ValueError(f"switch {self.name}: give exactly one of `nodes` (a leaf) or `switches` (a spine)")
        return self


class NodeLayout(SpecModel):
    """A pool's CPU layout as `slurmd -C` prints it on one of its nodes, and the memory kept for the system."""

    pool: DnsLabel
    """The pool whose nodes have this layout."""
    sockets: Annotated[int, Field(ge=1, le=64)]
    """`Sockets=` of `slurmd -C`."""
    cores_per_socket: Annotated[int, Field(ge=1, le=1024)]
    """`CoresPerSocket=` of `slurmd -C`."""
    threads_per_core: Annotated[int, Field(ge=1, le=8)]
    """`ThreadsPerCore=` of `slurmd -C`."""
    mem_spec_limit_mib: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="MemSpecLimit: MiB of RealMemory kept for the OS and slurmd, never given to jobs (0: none).",
    )

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core


class Slurm(SpecModel):
    """An on-prem Slurm cluster and the partition the GRPO gang runs in."""

    cluster_name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=40)]
    """Slurm ClusterName; shown in rendered files."""
    partition: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")]
    """The partition the rendered fragment defines and the job runs in."""
    max_time: SlurmTime = Field(description="Partition MaxTime.")
    time_limit: SlurmTime = Field(description="The job's --time.")
    oversubscribe: Literal["exclusive", "no", "yes"] = "exclusive"
    """Partition OverSubscribe: `exclusive` gives each job whole nodes."""
    gres: Gres
    container: Container
    interface: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$")] = Field(
        description="Network interface whose address Ray and NCCL bind to."
    )
    ray_ports: PortRange
    ray_auth: Literal["token", "disabled"] = Field(
        default="token",
        description="`token`: every job run makes a fresh random Ray token (RAY_AUTH_MODE=token), so only its own "
        "processes reach its GCS and raylets, which listen on every interface; `disabled`: anyone who reaches "
        "the port block can use the job's Ray.",
    )
    deploy: SlurmDeploy | None = Field(default=None, description="Where `pulumi up` places the rendered files.")
    node_layouts: list[NodeLayout] = Field(
        default_factory=list, description="Each pool's Sockets/CoresPerSocket/ThreadsPerCore and MemSpecLimit."
    )
    shared_paths: list[AbsolutePath] = Field(
        default_factory=list,
        description="Host paths on a file system every node mounts (Lustre, NFS, GPFS); `check` warns when the "
        "model, the data or a one-node job's checkpoints lie outside them, and refuses a multi-node gang's checkpoints there.",
    )
    gres_types: list[GresName] = Field(
        default_factory=lambda: ["gpu"],
        description="The site's whole GresTypes list, written into the fragment (a second GresTypes line in "
        "slurm.conf replaces the first): list the GRES the site already has and drop its own line.",
    )
    accounting: Literal["slurmdbd", "none"] = Field(
        default="slurmdbd",
        description="`slurmdbd`: the fragment tracks gres/gpu and accounting.sh gives each tenant a QOS with its "
        "GPU quota; `none`: the cluster has no slurmdbd (slurmctld will not start with a gres TRES then), "
        "so no tenant quota holds on Slurm.",
    )
    accounting_tres: list[TresName] = Field(
        default_factory=lambda: ["gres/gpu"],
        description="The site's whole AccountingStorageTRES list, written into the fragment; QOS GrpTRES "
        "limits count only tracked TRES.",
    )
    checkpoint_save_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=300,
        description="Longest a checkpoint save takes; verl saves once more when the time-limit signal is less "
        "than this plus its longest step away.",
    )
    switches: list[Switch] = Field(default_factory=list, description="Fabric tree for topology.conf; none: no file.")
    retries: Annotated[int, Field(ge=0, le=100)] = Field(
        default=3,
        description="Requeues of a run whose training command failed with every node up (Xid, NCCL error, OOM, "
        "raylet death), counted only when the checkpoint did not advance during the failed run; 0: never.",
    )

    @field_validator("max_time", "time_limit")
    @classmethod
    def _valid_time(cls, value: str) -> str:
        time_limit_minutes(value)
        return value

    @model_validator(mode="after")
    def _ports_hold_a_block(self) -> Slurm:
        if block_count(self.ray_ports.start, self.ray_ports.end, MIN_BLOCK_SIZE) < 1:
            raise ValueError(f"`rayPorts` must span at least {MIN_BLOCK_SIZE} ports (one job's smallest block)")
        return self

    @model_validator(mode="after")
    def _site_lists(self) -> Slurm:
        if "gpu" not in self.gres_types:
            raise ValueError("`gresTypes` must include gpu (the GPUs are GRES gpu)")
        if "gres/gpu" not in self.accounting_tres:
            raise ValueError("`accountingTres` must include gres/gpu (the tenants' GrpTRES=gres/gpu limits count it)")
        pools = [n.pool for n in self.node_layouts]
        dupes = sorted({p for p in pools if pools.count(p) > 1})
        if dupes:
            raise ValueError(f"`nodeLayouts` describes pool {dupes[0]} twice")
        return self

    @model_validator(mode="after")
    def _switch_tree(self) -> Slurm:
        names = [s.name for s in self.switches]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"switch {dupes[0]} is named twice")
        for switch in self.switches:
            unknown = [n for n in switch.switches or [] if n not in names or n == switch.name]
            if unknown:
                raise ValueError(f"switch {switch.name} lists {unknown[0]}, which is not another switch")
        return self
