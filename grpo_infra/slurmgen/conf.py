"""slurm.conf, gres.conf and topology.conf fragments: one line per pool, never one per node."""

from __future__ import annotations

import re
from dataclasses import dataclass

import hostlist

from ..spec import Environment
from ..spec.pools import Pool
from ..spec.slurm import NodeLayout
from .templates import render_template

# The GRES name Slurm uses for GPUs; `--gres=gpu:<type>:<n>` asks for it.
GRES_NAME = "gpu"
_FEATURE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def compact(hosts: list[str]) -> str:
    """A hostlist expression such as gpu[001-016] for these host names."""
    return str(hostlist.collect_hostlist(hosts))


def feature(text: str) -> str:
    """A Slurm node feature (usable in --constraint) from free text such as a GPU model."""
    return _FEATURE_UNSAFE.sub("-", text).strip("-") or "gpu"


def pool_features(pool: Pool) -> list[str]:
    """Features of a pool's nodes: its name first (what the sbatch constrains on), then GPU and fabric."""
    found = [pool.name, feature(pool.gpu.model), pool.gpu.gres_type]
    if pool.fabric.kind != "none":
        found.append(pool.fabric.kind)
    return list(dict.fromkeys(found))


def gres_request(pool: Pool) -> str:
    """`gpu:<type>:<n>`: the GRES a node of this pool has, and a job asks for per node."""
    return f"{GRES_NAME}:{pool.gpu.gres_type}:{pool.gpu.per_node}"


@dataclass(frozen=True)
class NodeLine:
    hosts: str
    cpus: int
    layout: str
    """`Sockets=… CoresPerSocket=… ThreadsPerCore=…` as `slurmd -C` prints them, or empty when the stack omits it."""
    real_memory_mib: int
    mem_spec_limit_mib: int
    gres: str
    features: str


def node_layout(env: Environment, pool: Pool) -> NodeLayout | None:
    """The stack's `slurm.nodeLayouts` entry for this pool, if any."""
    assert env.slurm is not None
    return next((n for n in env.slurm.node_layouts if n.pool == pool.name), None)


def node_lines(env: Environment) -> list[NodeLine]:
    """One NodeName line per pool, its hosts as one compact hostlist.

    Without Sockets/CoresPerSocket/ThreadsPerCore Slurm takes CPUs as that many one-core sockets, so
    task/affinity and --cpu-bind place a job's threads without regard to the real sockets (slurm.conf(5),
    NodeName: "Sockets ... CoresPerSocket ... ThreadsPerCore", Slurm 22.05). MemSpecLimit keeps memory for
    the OS and slurmd out of every allocation (slurm.conf(5), MemSpecLimit).
    """
    lines = []
    for pool in env.pools:
        layout = node_layout(env, pool)
        words = ""
        if layout is not None:
            words = (
                f"Sockets={layout.sockets} CoresPerSocket={layout.cores_per_socket} "
                f"ThreadsPerCore={layout.threads_per_core}"
            )
        lines.append(
            NodeLine(
                hosts=compact(pool.host_names),
                cpus=pool.cpus,
                layout=words,
                real_memory_mib=pool.memory_gib * 1024,
                mem_spec_limit_mib=layout.mem_spec_limit_mib if layout else 0,
                gres=gres_request(pool),
                features=",".join(pool_features(pool)),
            )
        )
    return lines


def slurm_conf(env: Environment) -> str:
    """The slurm.conf fragment: GRES type, the pools' nodes and the GRPO partition."""
    slurm = env.slurm
    assert slurm is not None
    return render_template(
        "slurm.conf.j2",
        cluster=slurm.cluster_name,
        include_path=f"{slurm.deploy.directory}/slurm.conf" if slurm.deploy else "<directory>/slurm.conf",
        gres_types=",".join(slurm.gres_types),
        accounting_tres=",".join(slurm.accounting_tres) if slurm.accounting == "slurmdbd" else None,
        nodes=node_lines(env),
        partition=slurm.partition,
        partition_nodes=compact([h for p in env.pools for h in p.host_names]),
        oversubscribe=slurm.oversubscribe.upper(),
        max_time=slurm.max_time,
        accounts=",".join(dict.fromkeys(t.name for t in env.tenants)),
        qos=",".join(dict.fromkeys(t.queue for t in env.tenants)),
    )


@dataclass(frozen=True)
class GresLine:
    hosts: str
    gres_type: str
    files: str


def gres_conf(env: Environment) -> str:
    """gres.conf: NVML autodetection, or each pool's device files."""
    slurm = env.slurm
    assert slurm is not None
    lines: list[GresLine] = []
    if slurm.gres.files is not None:
        # The spec guarantees the pattern names exactly the widest pool's GPUs; each pool's nodes have the first
        # gpu.perNode of them (device files are numbered from 0 on every node).
        devices = hostlist.expand_hostlist(slurm.gres.files)
        for pool in env.pools:
            lines.append(GresLine(compact(pool.host_names), pool.gpu.gres_type, compact(devices[: pool.gpu.per_node])))
    return render_template(
        "gres.conf.j2", cluster=slurm.cluster_name, autodetect=slurm.gres.autodetect, gres_name=GRES_NAME, lines=lines
    )


@dataclass(frozen=True)
class SwitchLine:
    name: str
    nodes: str | None
    switches: str | None


def topology_conf(env: Environment) -> str | None:
    """topology.conf for topology/tree, or None when the spec describes no switches."""
    slurm = env.slurm
    assert slurm is not None
    if not slurm.switches:
        return None
    lines = []
    for switch in slurm.switches:
        nodes = None
        if switch.nodes is not None:
            # The spec guarantees a leaf names only the pools' hosts.
            nodes = compact(hostlist.expand_hostlist(switch.nodes))
        switches = compact(list(switch.switches)) if switch.switches else None
        lines.append(SwitchLine(switch.name, nodes, switches))
    return render_template("topology.conf.j2", cluster=slurm.cluster_name, switches=lines)
