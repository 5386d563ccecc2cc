"""What the local Slurm sandbox builds, computed from a stack before anything is touched.

Pure functions: the sandbox's view of the stack (its node list), the addresses, namespace and
link names, the paths of every daemon's files, and the base slurm.conf that includes the stack's
rendered fragment. `cluster.py` carries the plan out; tests read it without root.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import hostlist
from pydantic import ValidationError

from ..localnode import Machine
from ..slurmgen import SBATCH_PATH
from ..spec import Environment

# Everything the sandbox writes lives under this directory (the local-slurm stack names paths in it).
ROOT = Path(os.environ.get("GRPO_SANDBOX_ROOT", "/run/grpo-sandbox"))
# A private /24 used only on the sandbox's own bridge and inside its own network namespaces.
DEFAULT_SUBNET = "10.213.57.0/24"
NAMESPACE_PREFIX = "grpo-sbx-"
LINK_PREFIX = "gsbx"
BRIDGE = f"{LINK_PREFIX}-br"
CONTROLLER = "sbx-ctl"
HOSTS_BEGIN = "# BEGIN grpo-sandbox (added by `grpo-infra sandbox up`, removed by `down`)"
HOSTS_END = "# END grpo-sandbox"
MAX_NODES = 32
# Slurm timers chosen for a one-machine cluster: see docs/sandbox.md.
SLURMD_TIMEOUT = 15
CRED_EXPIRE = 30


class SandboxError(Exception):
    """The sandbox cannot be built or used; the message says what to do."""


def node_names(env: Environment, count: int) -> list[str]:
    """The job pool's first `count` hosts, continuing the stack's own numbering past its last host.

    local-slurm names node[1-3]: `--nodes 2` gives node1, node2; `--nodes 5` gives node1 … node5.
    """
    if not 1 <= count <= MAX_NODES:
        raise SandboxError(f"--nodes must be between 1 and {MAX_NODES}, got {count}")
    if env.disaggregated:
        return role_hosts(env, count)
    hosts = env.pool(env.gang_pool_name).host_names
    if not hosts:
        raise SandboxError(f"pool {env.gang_pool_name} has no `hosts`; the sandbox needs a Slurm stack's hostlist")
    names = hosts[:count]
    match = re.fullmatch(r"(.*?)(\d+)", hosts[-1])
    prefix, digits = (match[1], match[2]) if match else (hosts[-1] + "-", "0")
    number = int(digits)
    while len(names) < count:
        number += 1
        candidate = f"{prefix}{number:0{len(digits)}d}"
        if candidate not in names:
            names.append(candidate)
    return names


def role_hosts(env: Environment, count: int) -> list[str]:
    """A disaggregated stack's sandbox: every host of its roles' pools, as the stack names them.

    Its roles' pools differ (GPUs per node, features), so shrinking one would change what the job asks of
    Slurm: the sandbox runs the stack's own hosts or refuses."""
    pools = list(dict.fromkeys(r.pool.name for r in env.role_gangs()))
    hosts = [h for name in pools for h in env.pool(name).host_names]
    if count != len(hosts):
        raise SandboxError(
            f"a disaggregated stack runs on its roles' own hosts: --nodes {len(hosts)} "
            f"({hostlist.collect_hostlist(hosts)}), not {count}"
        )
    return hosts


def sandbox_environment(env: Environment, count: int) -> Environment:
    """The stack as the sandbox runs it: only the job's pool, holding exactly `count` hosts.

    With `count` equal to the stack's own pool size this is the stack itself (same rendered files).
    Otherwise the pool's hostlist is replaced by `node_names(env, count)`, a fixed gang size is
    capped at `count`, and tenant GPU quotas are scaled down if they would exceed the smaller pool.
    """
    if env.target != "slurm":
        raise SandboxError(f"the sandbox runs Slurm stacks; this stack's target is {env.target}")
    names = node_names(env, count)
    pool = env.pool(env.gang_pool_name)
    if env.disaggregated or (names == pool.host_names and len(env.pools) == 1):
        return env
    data = env.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["pools"] = [p for p in data["pools"] if p["name"] == pool.name]
    data["pools"][0]["hosts"] = hostlist.collect_hostlist(names)
    if env.job.nodes is not None and env.job.nodes > count:
        data["job"]["nodes"] = count
    capacity = count * pool.gpu.per_node
    quota = sum(t.gpu_quota for t in env.tenants)
    if quota > capacity:
        for tenant in data["tenants"]:
            tenant["gpuQuota"] = tenant["gpuQuota"] * capacity // quota
    try:
        return Environment.model_validate(data)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise SandboxError(
            f"the stack cannot run on a sandbox of {count} nodes ({hostlist.collect_hostlist(names)}): {reason}"
        ) from None


def resize_note(stack_env: Environment, plan: Plan) -> str | None:
    """What to tell the user when the sandbox's gang is not the stack's: the job was rendered for the sandbox.

    The stack's own sbatch asks for its gang; on fewer nodes Slurm would keep it pending for good
    (reason PartitionConfig), so the sandbox runs a job rendered for its own nodes, and says so.
    """
    want, have = stack_env.gang, plan.env.gang
    if (want.nodes, want.gpus_per_node) == (have.nodes, have.gpus_per_node):
        return None
    return (
        f"the stack's gang is {want.nodes} nodes × {want.gpus_per_node} GPUs (job {stack_env.job.name}); "
        f"this sandbox has {len(plan.nodes)} nodes, so its job {plan.sbatch} is rendered for "
        f"{have.nodes} × {have.gpus_per_node}. The stack's own sbatch (grpo-infra synth) would pend here "
        "for good (PartitionConfig)."
    )


@dataclass(frozen=True)
class Node(Machine):
    """One simulated machine: a network + UTS namespace running one slurmd."""

    namespace_prefix: ClassVar[str] = NAMESPACE_PREFIX
    link_prefix: ClassVar[str] = LINK_PREFIX


@dataclass(frozen=True)
class Plan:
    """Names, addresses and files of one sandbox."""

    stack: str
    env: Environment
    root: Path
    subnet: ipaddress.IPv4Network
    controller: Node
    nodes: tuple[Node, ...]

    @property
    def interface(self) -> str:
        """The interface name inside each node: the one the stack tells Ray to bind to."""
        assert self.env.slurm is not None
        return self.env.slurm.interface

    @property
    def bridge_address(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def stack_dir(self) -> Path:
        """The rendered tree of the stack as the sandbox runs it (`slurm/grpo.sbatch` is here)."""
        return self.root / "stack"

    @property
    def sbatch(self) -> Path:
        return self.stack_dir / SBATCH_PATH

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket.2"

    @property
    def ctl_dir(self) -> Path:
        return self.root / "ctl"

    @property
    def ray_tmp(self) -> Path:
        """Root of the jobs' Ray temp dirs (GRPO_RAY_TMPDIR of the rendered sbatch)."""
        return self.root / "tmp"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    @property
    def state_file(self) -> Path:
        return self.root / "sandbox.json"

    @property
    def node_list(self) -> str:
        return hostlist.collect_hostlist([n.name for n in self.nodes])


def make_plan(stack: str, env: Environment, count: int, root: Path = ROOT, subnet: str | None = None) -> Plan:
    """Lay out a sandbox of `count` nodes for the stack: addresses .2 (controller), .11 onwards (nodes)."""
    env = sandbox_environment(env, count)
    network = ipaddress.IPv4Network(subnet or os.environ.get("GRPO_SANDBOX_SUBNET", DEFAULT_SUBNET))
    if network.prefixlen > 24 or not network.is_private:
        raise SandboxError(f"sandbox subnet {network} must be a private /24 or larger")
    base = network.network_address
    controller = Node(CONTROLLER, 0, str(base + 2), network.prefixlen)
    names = node_names(env, count)
    nodes = tuple(Node(name, i, str(base + 10 + i), network.prefixlen) for i, name in enumerate(names, start=1))
    return Plan(stack=stack, env=env, root=root, subnet=network, controller=controller, nodes=nodes)


def base_slurm_conf(plan: Plan, fragment_path: Path) -> str:
    """The control settings only the sandbox knows (daemons, auth, paths); the stack's fragment is included.

    The fragment (GresTypes, NodeName, PartitionName) is the stack's rendered `slurm/slurm.conf`,
    included verbatim: node names resolve through the sandbox's /etc/hosts block, so it needs no NodeAddr.
    """
    assert plan.env.slurm is not None
    root = plan.root
    lines = [
        "# Local Slurm sandbox: written by `grpo-infra sandbox up`; the partition comes from the stack.",
        f"ClusterName={plan.env.slurm.cluster_name}",
        f"SlurmctldHost={plan.controller.name}({plan.controller.address})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={plan.munge_socket},cred_expire={CRED_EXPIRE}",
        f"StateSaveLocation={plan.ctl_dir}/state",
        f"SlurmctldPidFile={plan.ctl_dir}/slurmctld.pid",
        f"SlurmctldLogFile={plan.ctl_dir}/slurmctld.log",
        f"SlurmdSpoolDir={root}/nodes/%n/spool",
        f"SlurmdPidFile={root}/nodes/%n/slurmd.pid",
        f"SlurmdLogFile={root}/nodes/%n/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "SchedulerType=sched/backfill",
        # Heterogeneous jobs start only from the backfill scheduler (heterogeneous_jobs.html, "System
        # Administrator Information"): a pass every 5 s instead of 30 starts them without a long wait.
        "SchedulerParameters=bf_interval=5",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "ReturnToService=2",
        f"SlurmdTimeout={SLURMD_TIMEOUT}",
        "MessageTimeout=10",
        "KillWait=5",
        "InactiveLimit=0",
        "MinJobAge=600",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"Include {fragment_path}",
        "",
    ]
    return "\n".join(lines)


# Partition options that name accounts or QOS: Slurm checks them against slurmdbd's associations,
# which a sandbox without accounting does not have (every job would pend with "account not known").
_ACCOUNTING_OPTIONS = re.compile(r"\s+(AllowAccounts|DenyAccounts|AllowQos|DenyQos)=\S+")


def sandbox_fragment(fragment: str) -> tuple[str, list[str]]:
    """The stack's slurm.conf fragment as the sandbox includes it, and the options it left out.

    Only account/QOS filters of PartitionName lines are dropped (there is no slurmdbd to resolve
    them); nodes, GRES, OverSubscribe and MaxTime stay exactly as rendered.
    """
    dropped: list[str] = []
    lines = []
    for line in fragment.splitlines():
        if line.startswith("PartitionName="):
            dropped += [m.group(0).strip() for m in _ACCOUNTING_OPTIONS.finditer(line)]
            line = _ACCOUNTING_OPTIONS.sub("", line)
        lines.append(line)
    return "\n".join(lines) + "\n", dropped


def hosts_block(plan: Plan) -> str:
    """The marked /etc/hosts lines that make the controller and node names resolve."""
    lines = [HOSTS_BEGIN, f"{plan.controller.address} {plan.controller.name}"]
    lines += [f"{n.address} {n.name}" for n in plan.nodes]
    lines.append(HOSTS_END)
    return "\n".join(lines) + "\n"


def strip_hosts_block(text: str) -> str:
    """/etc/hosts without the sandbox's block (unchanged when there is none)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n") == HOSTS_BEGIN:
            inside = True
        elif inside and line.rstrip("\n") == HOSTS_END:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def device_paths(env: Environment) -> list[Path]:
    """Placeholder GPU device files: the expansion of the stack's `slurm.gres.files`."""
    assert env.slurm is not None
    pattern = env.slurm.gres.files
    if pattern is None:
        raise SandboxError(
            "this stack's GPUs are found by `gres.autodetect: nvml`; the sandbox has no NVML and needs "
            "`slurm.gres.files` (e.g. /run/grpo-sandbox/dev/nvidia[0-7]) to create placeholder devices"
        )
    return [Path(p) for p in hostlist.expand_hostlist(pattern)]
