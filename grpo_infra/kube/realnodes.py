"""Real nodes for the local Kubernetes: per node a network namespace on a bridge (the local-node
layer the Slurm sandbox uses too), its own mount and UTS namespace, containerd with runc, the
standard CNI plugins, a kubelet, and a device plugin advertising its fake GPUs; on the host, the
cluster DNS (dnsmasq fed from the API) and the API server forwarded onto the bridge.

Everything is found again from the kernel or from pid files naming the cluster's root, so
`teardown()` after a crash removes as much as after a clean run: processes (the nodes' namespaces
and cgroups), namespaces, links, the iptables chain, the cgroups, and the host paths created for
the nodes' bind mounts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from ..localnode import add_bridge, attach, check_subnet_free, kill_all, namespace_pids, namespaces
from ..localnode.run import LocalNodeError, run
from . import gpudriver, hcas, netpolicy, nodeimages, nodeseed, presented
from .nodes import (
    BRIDGE,
    CGROUP_PARENT,
    KERNEL_TUNABLES,
    NAMESPACE_PREFIX,
    NODE_INTERFACE,
    NODE_MOUNTS,
    NodeDirs,
    RealNode,
    boot_script,
    bridge_address,
    cni_config,
    containerd_config,
    kubelet_config,
    kubelet_kubeconfig,
    node_subnet,
)
from .plan import POD_CIDR, PORTS, SERVICE_CIDR, TOOLS, KubeError, Paths, Tool
from .versions import KUBERNETES

PROJECT = Path(__file__).resolve().parents[2]
KUBELET = Tool("kubelet", KUBERNETES)
CGROUPS = Path("/sys/fs/cgroup")
IPTABLES_CHAIN = "GRPO-KUBE"
CNI_BIN = Path("/usr/lib/cni")
# Programs real nodes need, and the Debian package of each (scripts/install-system-deps.sh).
PROGRAMS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "dnsmasq": "dnsmasq-base",
    "iptables": "iptables",
    "ipset": "ipset",  # kube-router's NetworkPolicy firewall (netpolicy.py)
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "ip": "iproute2",
    "cc": "gcc",
}


def which(program: str) -> str | None:
    return shutil.which(program) or next(
        (f"{d}/{program}" for d in ("/usr/sbin", "/sbin", "/usr/bin") if os.access(f"{d}/{program}", os.X_OK)), None
    )


def unavailable() -> str | None:
    """Why real nodes cannot run on this machine (one line), or None when they can."""
    if os.geteuid() != 0:
        return "real nodes need root (network and mount namespaces, cgroups); use --nodes fake or run as root"
    missing = sorted({pkg for prog, pkg in PROGRAMS.items() if which(prog) is None})
    if not (CNI_BIN / "bridge").is_file():
        missing.append("containernetworking-plugins")
    if missing:
        return (
            f"real nodes need {' '.join(missing)}: apt-get install -y --no-install-recommends {' '.join(missing)} "
            "(or scripts/install-system-deps.sh); or use --nodes fake"
        )
    if not KUBELET.path.is_file():
        return "kubelet not built: run scripts/build-kube.sh kubelet; or use --nodes fake"
    return None


# ------------------------------------------------------------------------------------------- network


def build_network(nodes: list[RealNode]) -> None:
    """The bridge (the host's address on it is .1), one namespace per node, and the routes that make
    every pod address reachable: from the host to each node's pod CIDR, and between nodes."""
    subnet = node_subnet()
    hint = "pick another private /24 with GRPO_KUBE_NODE_SUBNET=10.x.y.0/24"
    check_subnet_free(subnet, hint)
    check_subnet_free(ipaddress.IPv4Network(POD_CIDR), "the local cluster's pod network 10.244.0.0/16 is in use")
    host = bridge_address(subnet)
    add_bridge(BRIDGE, host, subnet.prefixlen)
    for node in nodes:
        attach(BRIDGE, node.link(NODE_INTERFACE))
        run(["ip", "-n", node.namespace, "route", "add", "default", "via", host])
        run(["ip", "route", "add", node.pod_cidr, "via", node.address])
    for node in nodes:
        for other in nodes:
            if other is not node:
                run(["ip", "-n", node.namespace, "route", "add", other.pod_cidr, "via", other.address])
        route_kubernetes_service(node.namespace, host)


def kubernetes_service_ip() -> str:
    """The `kubernetes` Service's cluster IP: the API server gives it the first address of its range
    (k8s.io/kubernetes v1.36.3 pkg/controlplane/apiserver/options/options.go `ServiceIPRange`)."""
    return str(next(ipaddress.IPv4Network(SERVICE_CIDR).hosts()))


def route_kubernetes_service(namespace: str, host: str) -> None:
    """Pods reach the API server in-cluster (KUBERNETES_SERVICE_HOST, what an operator's client reads) as
    kube-proxy would route it: the one ClusterIP any pod here needs, DNAT-ed in the node's namespace to
    the API server's forward on the bridge. Rules of the node's namespace go with it."""
    target = f"{host}:{PORTS['apiserver']}"
    rule = ["-d", kubernetes_service_ip(), "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", target]
    for chain in ("PREROUTING", "OUTPUT"):  # from pods, and from the node's own processes
        run(["ip", "netns", "exec", namespace, "iptables", "-t", "nat", "-A", chain, *rule])


def forward_apiserver() -> None:
    """Nodes reach the API server (on 127.0.0.1 only) at the bridge address: a DNAT in a chain of
    ours, with route_localnet on the bridge alone (it goes with the bridge)."""
    host = bridge_address()
    run(["sysctl", "-q", "-w", f"net.ipv4.conf.{BRIDGE}.route_localnet=1"])
    run(["iptables", "-t", "nat", "-N", IPTABLES_CHAIN])
    port = str(PORTS["apiserver"])
    rule = [
        "-i",
        BRIDGE,
        "-d",
        host,
        "-p",
        "tcp",
        "--dport",
        port,
        "-j",
        "DNAT",
        "--to-destination",
        f"127.0.0.1:{port}",
    ]
    run(["iptables", "-t", "nat", "-A", IPTABLES_CHAIN, *rule])
    run(["iptables", "-t", "nat", "-I", "PREROUTING", "-j", IPTABLES_CHAIN])


def remove_forward() -> list[str]:
    if run(["iptables", "-t", "nat", "-S", IPTABLES_CHAIN], check=False) == "":
        return []
    run(["iptables", "-t", "nat", "-D", "PREROUTING", "-j", IPTABLES_CHAIN], check=False)
    run(["iptables", "-t", "nat", "-F", IPTABLES_CHAIN], check=False)
    run(["iptables", "-t", "nat", "-X", IPTABLES_CHAIN], check=False)
    return [f"removed iptables chain {IPTABLES_CHAIN}"]


def server_on_bridge() -> str:
    return f"https://{bridge_address()}:{PORTS['apiserver']}"


# ----------------------------------------------------------------------------------------------- DNS


def dns_argv(paths: Paths) -> list[str]:
    """dnsmasq answering on the bridge address only, from the hosts files the feeder writes, for
    the cluster domain alone (nothing is forwarded anywhere: no upstream, no /etc/hosts)."""
    return [
        which("dnsmasq") or "dnsmasq",
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        "--no-negcache",
        "--local-ttl=1",
        f"--listen-address={bridge_address()}",
        "--bind-interfaces",
        "--local=/cluster.local/",
        f"--hostsdir={paths.root / 'dns'}",
        f"--pid-file={paths.pidfile('dnsmasq-own')}",
        "--user=root",
        "--log-facility=-",
    ]


def dnsfeed_argv(paths: Paths) -> list[str]:
    return [
        sys.executable,
        "-m",
        "grpo_infra.kube.dnsfeed",
        f"--pki={paths.pki}",
        f"--server=https://127.0.0.1:{PORTS['apiserver']}",
        f"--hosts-dir={paths.root / 'dns'}",
    ]


def node_env(root: Path) -> dict[str, str]:
    """Environment of every node process: this checkout's code (the device plugin) and the cluster's
    root, by which the processes are found again."""
    return {"PYTHONPATH": str(PROJECT), "GRPO_KUBE_ROOT": str(root), "PATH": os.environ.get("PATH", "")}


# --------------------------------------------------------------------------------------------- nodes


def node_dirs(paths: Paths, node: str) -> NodeDirs:
    return NodeDirs(paths.root / "nodes" / node)


def _cgroup_hierarchies() -> list[Path]:
    """This machine's cgroup hierarchies (v1 controllers, the named systemd one, the unified one)."""
    return sorted(p for p in CGROUPS.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def make_cgroups(node: RealNode) -> None:
    """The node's cgroup root in every hierarchy (the kubelet refuses a cgroupRoot that is missing);
    cpuset's cpus and mems copied down, as a new cpuset cgroup starts empty."""
    for hierarchy in _cgroup_hierarchies():
        if hierarchy.name == "unified":
            continue
        parent = hierarchy
        for part in node.cgroup_root.strip("/").split("/"):
            child = parent / part
            child.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (child / knob).read_text().strip():
                        (child / knob).write_text((parent / knob).read_text())
            parent = child


def _walk_files(top: Path, name: str) -> Iterator[Path]:
    """Every `name` under `top`, skipping directories that vanish during the walk (a container's cgroup
    is removed when it exits: `Path.rglob` raises FileNotFoundError then, and a node half-killed stays up)."""
    for parent, _dirs, files in os.walk(top, onerror=lambda _error: None):
        if name in files:
            yield Path(parent) / name


def cgroup_pids(node: str | None = None) -> list[int]:
    """Every process in the nodes' cgroups (containers outlive their node's daemons otherwise)."""
    pids: set[int] = set()
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / CGROUP_PARENT / (node or "")
        if not top.is_dir():
            continue
        for procs in _walk_files(top, "cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def remove_cgroups() -> list[str]:
    """rmdir the nodes' cgroups, deepest first (a cgroup directory is removed with rmdir only)."""
    done = []
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / CGROUP_PARENT
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
        done.append(f"removed cgroup {top}")
    return done


def prepare_node(node: RealNode, paths: Paths, created: list[str], token: str | None = None) -> NodeDirs:
    """The node's directories and configuration files, its cgroups, and the host paths its bind
    mounts need (recorded in `created` when this made them). With `token` (a ServiceAccount token of the
    NetworkPolicy agent), the node runs the agent (netpolicy.py)."""
    dirs = node_dirs(paths, node.name)
    for d in (
        dirs.etc / "cni",
        dirs.logs,
        dirs.run,
        dirs.containerd_root,
        *(dirs.mount_source(t) for t in NODE_MOUNTS),
    ):
        d.mkdir(parents=True, exist_ok=True)
    for target in NODE_MOUNTS:
        top = Path(target)
        if not top.exists():
            while not top.parent.exists():
                top = top.parent
            if str(top) not in created:
                created.append(str(top))
            Path(target).mkdir(parents=True, exist_ok=True)
    (dirs.base / "sys").mkdir(exist_ok=True)
    for name, value in KERNEL_TUNABLES.items():
        dirs.tunable(name).write_text(value + "\n")
    dns = bridge_address()
    (dirs.etc / "resolv.conf").write_text(f"nameserver {dns}\n")
    (dirs.etc / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node, dirs, paths.pki / "ca.crt", dns)))
    (dirs.etc / "kubeconfig").write_text(kubelet_kubeconfig(node, paths.pki, server_on_bridge()))
    runc = which("runc") or "runc"
    hooks = []
    if node.driver is not None:
        hooks.append(gpudriver.driver_hook(gpudriver.write_driver_dir(dirs.base, node.driver)))
    if node.verbs is not None:
        hooks.append(hcas.verbs_hook(hcas.write_verbs_dir(dirs.base, node.verbs)))
    if hooks:
        runtime = dirs.etc / presented.RUNTIME_FILE
        runtime.write_text(presented.runtime_script(sys.executable, runc, hooks, dirs.etc))
        runtime.chmod(0o755)
        runc = str(runtime)
    (dirs.etc / "containerd.toml").write_text(containerd_config(dirs, runc, str(CNI_BIN), nodeimages.PAUSE_REF))
    (dirs.etc / "cni" / "10-grpo-pods.conflist").write_text(json.dumps(cni_config(node), indent=2))
    make_cgroups(node)
    kubelet = [
        str(KUBELET.path),
        f"--config={dirs.etc / 'kubelet.yaml'}",
        f"--kubeconfig={dirs.etc / 'kubeconfig'}",
        f"--node-ip={node.address}",
        f"--hostname-override={node.name}",
        "--v=1",
    ]
    if node.labels:
        kubelet.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(node.labels.items())))
    plugin = None
    if node.devices:
        plugin = [sys.executable, "-m", "grpo_infra.kube.deviceplugin"]
        plugin += [f"{resource}={count}" for resource, count in node.devices.items()]
        if node.verbs is not None:
            uverbs = hcas.write_device_nodes(dirs.base, len(node.verbs.devices))
            plugin += ["--device-dir", f"{node.verbs.resource}={uverbs}={hcas.DEVICE_DIR}"]
    network_policy = None
    if token is not None:
        ca, server = paths.pki / "ca.crt", server_on_bridge()
        config = netpolicy.write_kubeconfig(dirs.etc / f"{netpolicy.NAME}.kubeconfig", server, ca, token)
        network_policy = netpolicy.agent_argv(TOOLS["kube-router"].path, node.name, config, SERVICE_CIDR)
    (dirs.base / "boot.sh").write_text(
        boot_script(
            node,
            dirs,
            containerd=which("containerd") or "containerd",
            kubelet=kubelet,
            device_plugin=plugin,
            network_policy=network_policy,
        )
    )
    return dirs


def start_node(node: RealNode, paths: Paths) -> None:
    """Boot the node: its namespaces entered by nsenter (not `ip netns exec`, which remounts /sys),
    a private mount and UTS namespace by unshare, then its boot script."""
    dirs = node_dirs(paths, node.name)
    with open(dirs.logs / "boot.log", "ab") as out:
        subprocess.Popen(
            [
                which("nsenter") or "nsenter",
                f"--net=/run/netns/{node.namespace}",
                which("unshare") or "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "sh",
                str(dirs.base / "boot.sh"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=node_env(paths.root),
            start_new_session=True,
            cwd=dirs.base,
        )


def seed_disks(nodes: list[RealNode], paths: Paths, archives: list[Path]) -> None:
    """Every node's containerd root starts as the seed of `archives` (nodeseed.py), as a cloud node boots
    from a disk image with its images pulled; the import that follows finds them there."""
    with nodeseed.seeded(
        archives, which("containerd") or "containerd", which("ctr") or "ctr", which("unshare") or "unshare"
    ) as root:
        for node in nodes:
            nodeseed.clone(root, node_dirs(paths, node.name).containerd_root)


def load_node_images(node: RealNode, paths: Paths, archives: list[Path], timeout: float) -> None:
    """Once the node's containerd answers, import every archive into it."""
    sock = node_dirs(paths, node.name).containerd_socket
    deadline = time.monotonic() + timeout
    while not sock.is_socket():
        if time.monotonic() > deadline:
            log = node_dirs(paths, node.name).logs
            raise KubeError(f"containerd of node {node.name} did not start within {timeout:.0f}s; see {log}")
        time.sleep(0.1)
    nodeimages.load_images(sock, archives, ctr=which("ctr"))


def load_all_images(nodes: list[RealNode], paths: Paths, archives: list[Path], timeout: float) -> None:
    """Import into every node at once (one thread each; ctr does the work)."""
    errors: list[str] = []

    def one(node: RealNode) -> None:
        try:
            load_node_images(node, paths, archives, timeout)
        except (KubeError, nodeimages.ImageError) as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise KubeError(errors[0])


def node_pids(name: str) -> list[int]:
    """Every process of one node: its daemons and shims (its network namespace), its containers
    (its cgroups)."""
    return sorted(set(namespace_pids(RealNode.namespace_of(name))) | set(cgroup_pids(name)))


def kill_node(name: str) -> list[int]:
    """Kill one node the way a machine dies: kubelet, containerd, device plugin and every container
    at once, with SIGKILL. Its namespace and bridge link stay (the machine is off, not unplugged)."""
    return kill_all(lambda: node_pids(name))


def kill_nodes() -> list[str]:
    """Kill every node's processes (all namespaces of ours and all cgroups of ours)."""
    names = [ns.removeprefix(NAMESPACE_PREFIX) for ns in namespaces(NAMESPACE_PREFIX)]

    def everything() -> list[int]:
        pids = set(cgroup_pids())
        for ns in namespaces(NAMESPACE_PREFIX):
            pids.update(namespace_pids(ns))
        return sorted(pids)

    killed = kill_all(everything)
    return [f"killed {len(killed)} processes of nodes {' '.join(names)}"] if killed else []


def mounts_of(root: Path) -> Iterator[str]:
    """Mount points on this machine (the host's mount namespace) under the cluster's root."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4]
            if point.startswith(str(root)):
                yield point


def wrap(call: object) -> None:
    """Run a local-node step, its failure as a KubeError."""
    try:
        call()  # type: ignore[operator]
    except LocalNodeError as exc:
        raise KubeError(str(exc)) from None
