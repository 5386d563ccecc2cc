"""What of this machine a local cluster with real nodes could leave changed: read before `kube up`
and after `kube down`, compared item by item."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grpo_infra.kube import realnodes
from grpo_infra.kube.nodes import CGROUP_PARENT, KERNEL_TUNABLES, LINK_PREFIX, NAMESPACE_PREFIX, NODE_MOUNTS
from grpo_infra.kube.plan import ROOT

# The host sysctls the kubelet writes, and those a node network could be tempted to change.
SYSCTLS = (
    *KERNEL_TUNABLES,
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/conf/lo/route_localnet",
)


def _out(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def sysctls() -> dict[str, str]:
    return {name: Path(f"/proc/sys/{name}").read_text().strip() for name in SYSCTLS}


def iptables() -> str:
    """Every table's rules, without the packet counters. A table that holds no rule is left out: with
    the nf_tables backend a table the CNI plugins once used stays listed, empty, after its last rule is
    deleted (a fresh machine shows no `*nat` before the first cluster and an empty one after), and an
    empty table changes no packet."""
    tables: list[list[str]] = []
    for line in _out("iptables-save").splitlines():
        if line.startswith("*"):
            tables.append([line])
        elif tables and not line.startswith(("#", ":", "COMMIT")):
            tables[-1].append(line)
    return "\n".join("\n".join(table) for table in tables if len(table) > 1)


def cluster_processes() -> list[str]:
    """Processes that are the cluster's: their command line or environment names its root (every
    daemon of a node, the shims included, inherits GRPO_KUBE_ROOT), a kubelet, or anything in the
    nodes' cgroups (the containers)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        own = str(ROOT) in cmdline or f"GRPO_KUBE_ROOT={ROOT}".encode() in environ
        if own or cmdline.split(" ")[0].endswith("kubelet"):
            found.append(f"{proc.name} {cmdline.strip()}")
    found += [f"{pid} (in the nodes' cgroups)" for pid in realnodes.cgroup_pids()]
    return sorted(found)


def mounts() -> list[str]:
    """Mount points of the cluster in this machine's mount namespace: under its root or over the
    nodes' fixed paths (the nodes' own mounts live in their mount namespaces and die with them)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point.startswith(str(ROOT)) or point.startswith(NODE_MOUNTS):
            points.append(point)
    return sorted(points)


def snapshot() -> dict[str, object]:
    return {
        "processes": cluster_processes(),
        "namespaces": sorted(n for n in _out("ip", "netns", "list").split() if n.startswith(NAMESPACE_PREFIX)),
        "links": sorted(
            line.split(":")[1].strip().split("@")[0]
            for line in _out("ip", "-o", "link", "show").splitlines()
            if line.split(":")[1].strip().startswith(LINK_PREFIX)
        ),
        "veths": sorted(
            line.split(":")[1].strip()
            for line in _out("ip", "-o", "link", "show", "type", "veth").splitlines()
            if not line.split(":")[1].strip().startswith(("gsbx",))  # the Slurm sandbox's own
        ),
        "routes": sorted(line for line in _out("ip", "-4", "route", "show").splitlines() if "10.244." in line),
        "mounts": mounts(),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}")),
        "iptables": iptables(),
        "sysctls": sysctls(),
        "paths": {p: Path(p).exists() for p in (*NODE_MOUNTS, "/etc/kueue", str(ROOT))},
    }
