"""Slurm feasibility: the job against its partition, its Ray ports and interface against the nodes,
the nodes' layout, the tenants' QOS, the time-limit checkpoint; and where the job's files live."""

from __future__ import annotations

from ..ports import WORKER_OFFSET, block_count, worker_ports_needed
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.pools import Pool
from ..spec.slurm import PortRange, time_limit_minutes
from .violation import Violation

SLURM = f"{ENVIRONMENT_KEY}.slurm"
# Linux's default net.ipv4.ip_local_port_range: the kernel hands these out to outgoing connections,
# so a Ray port inside it can be taken by any client socket on the node before Ray binds it.
EPHEMERAL_PORTS = (32768, 60999)


def slurm_violations(env: Environment) -> list[Violation]:
    """Time against MaxTime, the port range against the kernel's ephemeral range, the interface against the fabric."""
    assert env.slurm is not None
    return [
        *_time(env),
        *_ports(env),
        *_interface(env),
        *_node_layouts(env),
        *_qos(env),
        *_checkpoint(env),
    ]


def slurm_warnings(env: Environment) -> list[Violation]:
    """What may still be wrong but `check` cannot know: a quota on the QOS every association uses by
    default, or no quota at all (the job's paths: check/paths.py, one rule for both targets)."""
    assert env.slurm is not None
    return [*_missing_layouts(env), *_default_qos(env), *_unenforced_quota(env)]


def _unenforced_quota(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    if slurm.accounting == "slurmdbd":
        return []
    return [
        Violation(
            "slurm-quota-unenforced",
            f"{SLURM}.accounting",
            "the cluster has no slurmdbd: the tenants' gpuQuota is not enforced on Slurm, any tenant may take every GPU",
        )
    ]


# The QOS slurmdbd creates and gives every association unless told otherwise (sacctmgr(1), "QosLevel").
DEFAULT_QOS = "normal"


def _default_qos(env: Environment) -> list[Violation]:
    return [
        Violation(
            "slurm-qos-default",
            f"{ENVIRONMENT_KEY}.tenants[{i}].queue",
            f"tenant {t.name} submits to QOS {DEFAULT_QOS}, the default QOS of every account: accounting.sh's "
            f"GrpTRES=gres/gpu={t.gpu_quota} on it would cap everyone who uses it, not only {t.name}",
        )
        for i, t in enumerate(env.tenants)
        if t.queue == DEFAULT_QOS
    ]


def _time(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    asked, allowed = time_limit_minutes(slurm.time_limit), time_limit_minutes(slurm.max_time)
    if asked <= allowed:
        return []
    return [
        Violation(
            "slurm-time-limit",
            f"{SLURM}.timeLimit",
            f"the job asks for {slurm.time_limit}; partition {slurm.partition} allows {slurm.max_time}: "
            "sbatch would leave it pending forever",
            f"{asked - allowed} minutes",
        )
    ]


def _ports(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    return port_range_violations(
        "slurm", slurm.ray_ports, f"{SLURM}.rayPorts", env.gang.pool, shared_nodes=slurm.oversubscribe != "exclusive"
    )


def port_range_violations(
    target: str, ports: PortRange, where: str, pool: Pool, *, shared_nodes: bool
) -> list[Violation]:
    """A Ray port range against the kernel's ephemeral range, against one block of the size `pool`'s nodes
    need, and (nodes shared by jobs) against two blocks.

    Every target that starts Ray on machines of its own (Slurm, the launchers) uses this rule."""
    size = pool.ray_block_size
    blocks = block_count(ports.start, ports.end, size)
    if blocks < 1:
        workers = worker_ports_needed(pool.cpus, pool.gpu.per_node)
        return [
            Violation(
                f"{target}-ports-block",
                where,
                f"{ports.start}-{ports.end} holds {ports.end - ports.start + 1} ports, less than one job's block of "
                f"{size} that pool {pool.name}'s nodes need ({pool.cpus} CPUs, {pool.gpu.per_node} GPUs: "
                f"{WORKER_OFFSET} fixed ports and {workers} worker ports); widen the range",
                f"{size - (ports.end - ports.start + 1)} ports",
            )
        ]
    out = []
    low, high = max(ports.start, EPHEMERAL_PORTS[0]), min(ports.end, EPHEMERAL_PORTS[1])
    if low <= high:
        out.append(
            Violation(
                f"{target}-ports-ephemeral",
                where,
                f"ports {low}-{high} are in the kernel's ephemeral range {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}; "
                "a client socket can take one before Ray binds it",
                f"{high - low + 1} ports",
            )
        )
    if shared_nodes and blocks < 2:
        out.append(
            Violation(
                f"{target}-ports-shared-nodes",
                where,
                f"nodes are shared between jobs, but the range holds one port block of {size}: two jobs would collide",
                "1 block",
            )
        )
    return out


def _interface(env: Environment) -> list[Violation]:
    slurm = env.slurm
    assert slurm is not None
    return interface_violations("slurm", slurm.interface, env.gang.pool, f"{SLURM}.interface")


def interface_violations(target: str, interface: str, pool: Pool, where: str) -> list[Violation]:
    """Ray and NCCL bind to `interface`: it must be one of the pool's fabric interfaces when those are named."""
    if pool.fabric.interfaces and interface not in pool.fabric.interfaces:
        return [
            Violation(
                f"{target}-interface",
                where,
                f"Ray and NCCL bind to {interface}, which is not an interface of pool {pool.name}'s fabric "
                f"({', '.join(pool.fabric.interfaces)})",
            )
        ]
    return []


def _node_layouts(env: Environment) -> list[Violation]:
    """Each pool's NodeName line must say what `slurmd -C` finds, or slurmd drains the node.

    slurmctld compares a registering node with its NodeName line and drains it ("Low socket*core*thread
    count", "Low RealMemory") when it has less (slurm.conf(5), NodeName, Slurm 22.05).
    """
    slurm = env.slurm
    assert slurm is not None
    out = []
    pools = {p.name: p for p in env.pools}
    for i, layout in enumerate(slurm.node_layouts):
        where = f"{SLURM}.nodeLayouts[{i}]"
        pool = pools.get(layout.pool)
        if pool is None:
            out.append(Violation("slurm-node-layout", f"{where}.pool", f"{layout.pool} is not a pool"))
            continue
        if layout.cpus != pool.cpus:
            out.append(
                Violation(
                    "slurm-node-layout",
                    where,
                    f"{layout.sockets} sockets x {layout.cores_per_socket} cores x {layout.threads_per_core} threads "
                    f"= {layout.cpus} CPUs, but pool {pool.name} has cpus {pool.cpus}: slurmd would drain its nodes",
                    f"{abs(layout.cpus - pool.cpus)} CPUs",
                )
            )
        if layout.mem_spec_limit_mib >= pool.memory_gib * 1024:
            out.append(
                Violation(
                    "slurm-node-layout",
                    f"{where}.memSpecLimitMib",
                    f"MemSpecLimit {layout.mem_spec_limit_mib} MiB leaves no memory of pool {pool.name}'s "
                    f"{pool.memory_gib * 1024} MiB for jobs",
                )
            )
    return out


def _missing_layouts(env: Environment) -> list[Violation]:
    """Without a layout Slurm takes each CPU for a one-core socket: jobs run, but tasks are bound
    without regard to the real sockets, and slurmctld logs that the node differs from its hardware."""
    slurm = env.slurm
    assert slurm is not None
    described = {n.pool for n in slurm.node_layouts}
    return [
        Violation(
            "slurm-node-layout-missing",
            f"{SLURM}.nodeLayouts",
            f"pool {pool.name} (pools[{i}]) has no layout: give Sockets, CoresPerSocket and ThreadsPerCore "
            "as `slurmd -C` prints them on one of its nodes",
        )
        for i, pool in enumerate(env.pools)
        if pool.name not in described
    ]


def _qos(env: Environment) -> list[Violation]:
    """A QOS holds one GrpTRES: tenants sharing a QOS with different quotas would get neither."""
    out = []
    by_qos: dict[str, list[tuple[str, int]]] = {}
    for tenant in env.tenants:
        by_qos.setdefault(tenant.queue, []).append((tenant.name, tenant.gpu_quota))
    for qos, tenants in by_qos.items():
        if len(tenants) > 1:
            names = ", ".join(f"{name} ({gpus} GPUs)" for name, gpus in tenants)
            out.append(
                Violation(
                    "slurm-qos-shared",
                    f"{ENVIRONMENT_KEY}.tenants",
                    f"tenants {names} share QOS {qos}, whose GrpTRES=gres/gpu limit is one number for all of them: "
                    "give each tenant its own `queue`",
                )
            )
    return out


def _checkpoint(env: Environment) -> list[Violation]:
    """The time-limit path must leave room for a save, and a requeued run must resume."""
    from ..slurmgen.sbatch import SIGNAL_BEFORE_LIMIT_S

    slurm, checkpoint = env.slurm, env.job.checkpoint
    assert slurm is not None
    out = []
    limit_s = time_limit_minutes(slurm.time_limit) * 60
    needed = SIGNAL_BEFORE_LIMIT_S + slurm.checkpoint_save_seconds
    if limit_s <= needed:
        out.append(
            Violation(
                "slurm-checkpoint-window",
                f"{SLURM}.timeLimit",
                f"the time-limit signal ({SIGNAL_BEFORE_LIMIT_S} s before the end) and one save "
                f"(checkpointSaveSeconds {slurm.checkpoint_save_seconds}) need {needed} s; the job has {limit_s} s",
                f"{needed - limit_s} s",
            )
        )
    if checkpoint.resume == "disable":
        out.append(
            Violation(
                "slurm-requeue-resume",
                f"{ENVIRONMENT_KEY}.job.checkpoint.resume",
                "the job requeues itself at the time limit, but resume is `disable`: every run would start "
                "from step 0 again; use `auto`",
            )
        )
    return out
