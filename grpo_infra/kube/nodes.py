"""The real nodes of the local Kubernetes, planned before anything starts: one per host of each
pool plus a CPU node, each a network namespace on a bridge with its own address and pod CIDR, and
the configuration files its kubelet, containerd and CNI read.

Pure functions; `realnodes.py` carries the plan out. The facts of the outside programs are cited
where used: kubelet v1.36.3 (`KubeletConfiguration` v1beta1, k8s.io/kubelet
`config/v1beta1/types.go`), containerd v1.6 (config version 2, `docs/cri/config.md`), the CNI
plugins v1.1 (`bridge`, `host-local`).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ..k8s.placement import node_selector, node_taints
from ..localnode import Machine
from ..spec import Environment
from .gpudriver import presented_driver
from .hcas import Verbs
from .netpolicy import LOG as NETWORK_POLICY_LOG
from .plan import POD_CIDR, PORTS, cpu_node_names, pool_hosts

# The nodes' bridge and namespaces; away from the Slurm sandbox's (grpo-sbx-, gsbx, 10.213.57.0/24).
NAMESPACE_PREFIX = "grpo-kn-"
LINK_PREFIX = "gkn"
BRIDGE = f"{LINK_PREFIX}-br"
DEFAULT_SUBNET = "10.213.58.0/24"
NODE_INTERFACE = "eth0"
CLUSTER_DOMAIN = "cluster.local"
# The cgroup under which each kubelet puts its pods (cgroupRoot `/grpo-kube/<node>`).
CGROUP_PARENT = "grpo-kube"
# The host files the kubelet writes (kubelet `setupKernelTunables`, pkg/kubelet/cm/container_manager_linux.go)
# with the values it wants: each node's mount namespace covers them with files of its own.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}
# Host directories that are fixed paths in the kubelet and containerd (the device-plugin socket
# directory under /var/lib/kubelet, the shims' sockets under /run/containerd, host-local IPAM's
# /var/lib/cni, the pod logs): each node binds a directory of its own over them.
NODE_MOUNTS = ("/var/lib/kubelet", "/run/containerd", "/var/lib/cni", "/var/log/pods", "/var/log/containers")


def node_subnet() -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(os.environ.get("GRPO_KUBE_NODE_SUBNET", DEFAULT_SUBNET))


@dataclass(frozen=True)
class RealNode(Machine):
    """One simulated machine running a kubelet and a containerd."""

    namespace_prefix: ClassVar[str] = NAMESPACE_PREFIX
    link_prefix: ClassVar[str] = LINK_PREFIX

    pod_cidr: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    # Extended resources its device plugin advertises (nvidia.com/gpu, fabric devices).
    devices: dict[str, int] = field(default_factory=dict)
    # The NVIDIA driver its containers see (gpudriver.py); None on a CPU node, which has none.
    driver: str | None = None
    # The HCAs of an InfiniBand or RoCE pool's node (hcas.py); None elsewhere.
    verbs: Verbs | None = None

    @property
    def pod_gateway(self) -> str:
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 1)

    @property
    def cgroup_root(self) -> str:
        return f"/{CGROUP_PARENT}/{self.name}"


def bridge_address(subnet: ipaddress.IPv4Network | None = None) -> str:
    """The host's address on the nodes' bridge: the API server (forwarded) and the DNS server."""
    return str((subnet or node_subnet()).network_address + 1)


# The one block every local GPU node is in, at each level of the stack's topology (Kueue TAS).
TOPOLOGY_BLOCK = "local-block-0"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def topology_labels(env: Environment) -> dict[str, str]:
    """The labels the stack's TAS levels name (all but the hostname, which the kubelet sets): one block."""
    topology = env.kubernetes.topology if env.kubernetes is not None else None
    levels = topology.levels if topology is not None else []
    return {level: TOPOLOGY_BLOCK for level in levels if level != HOSTNAME_LABEL}


def real_nodes(env: Environment, subnet: ipaddress.IPv4Network | None = None, cpu_nodes: int = 1) -> list[RealNode]:
    """Every pool's hosts with the pool's labels (and its topology's), taints, devices and NVIDIA driver, then
    the untainted CPU nodes (no driver, the head pool's labels) for Ray heads and job submitters; addresses
    .11 onwards, pod CIDRs 10.244.<i>.0/24."""
    subnet = subnet or node_subnet()
    pods = ipaddress.IPv4Network(POD_CIDR)
    specs: list[tuple[str, dict[str, str], tuple[dict[str, str], ...], dict[str, int], Verbs | None]] = []
    topology = topology_labels(env)
    for pool in env.pools:
        devices = {pool.gpu.resource: pool.gpu.per_node}
        if pool.fabric.resource and pool.fabric.devices_per_node:
            devices[pool.fabric.resource] = pool.fabric.devices_per_node
        verbs = None
        if pool.fabric.verbs and pool.fabric.resource:
            verbs = Verbs(pool.fabric.kind, pool.fabric.resource, tuple(pool.fabric.hcas))
        for host in pool_hosts(pool):
            specs.append((host, {**node_selector(pool), **topology}, tuple(node_taints(pool)), devices, verbs))
    head = env.kubernetes.head_pool if env.kubernetes is not None else None
    specs += [(name, dict(head.labels) if head else {}, (), {}, None) for name in cpu_node_names(cpu_nodes)]
    if len(specs) > min(200, 2 ** (24 - subnet.prefixlen) * 256 - 12):
        raise ValueError(f"{len(specs)} real nodes do not fit the node subnet {subnet}")
    out = []
    gpu_driver = presented_driver(env)
    for i, (name, labels, taints, devices, verbs) in enumerate(specs, start=1):
        cidr = str(list(pods.subnets(new_prefix=24))[i])
        driver = gpu_driver if devices else None
        address = str(subnet.network_address + 10 + i)
        out.append(RealNode(name, i, address, subnet.prefixlen, cidr, labels, taints, devices, driver, verbs))
    return out


@dataclass(frozen=True)
class NodeDirs:
    """Where one node's files live under the cluster's root (`nodes/<name>/`)."""

    base: Path

    @property
    def etc(self) -> Path:
        return self.base / "etc"

    @property
    def logs(self) -> Path:
        return self.base / "logs"

    @property
    def run(self) -> Path:
        return self.base / "run"

    @property
    def containerd_root(self) -> Path:
        return self.base / "containerd"

    def mount_source(self, target: str) -> Path:
        """The node's own directory bound over a fixed host path (`/var/lib/kubelet` -> fs/var-lib-kubelet)."""
        return self.base / "fs" / target.strip("/").replace("/", "-")

    @property
    def containerd_socket(self) -> Path:
        """containerd's socket as the host reaches it (inside the node: /run/containerd/containerd.sock)."""
        return self.mount_source("/run/containerd") / "containerd.sock"

    def tunable(self, name: str) -> Path:
        return self.base / "sys" / name.replace("/", "-")

    def pidfile(self, name: str) -> Path:
        return self.run / f"{name}.pid"


def kubelet_config(node: RealNode, dirs: NodeDirs, ca: Path, dns: str) -> dict[str, Any]:
    """The kubelet's configuration: cgroupfs under a cgroup root of the node's own (the host's
    hierarchy is cgroup v1, hence failCgroupV1: false), no image GC (the images are made here and
    cannot be pulled again), thresholds that a shared development disk does not trip, the
    node's taints registered by the kubelet itself as on a cloud node, the cluster DNS. `syncFrequency` 10 s
    (the kubelet's default is 1 min): a Secret written after its pod started reaches the pod's volume at the
    kubelet's next sync of that pod, and Kueue's chart mounts the webhook certificate its own controller writes
    a moment after the pod starts, so Kueue became ready 18-22 s or 106-120 s after its release was created,
    as that sync fell (13 rehearsals' logs; with 10 s: 19, 29 and 19 s in three installs). Nothing the stacks
    run depends on the period."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "clusterDNS": [dns],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(dirs.etc / "resolv.conf"),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "registerWithTaints": [dict(t) for t in node.taints],
        "serializeImagePulls": False,
        "syncFrequency": "10s",
        "maxPods": 110,
        "protectKernelDefaults": False,
    }


def kubelet_kubeconfig(node: RealNode, pki: Path, server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "grpo-local", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}
            ],
            "users": [
                {
                    "name": node.name,
                    "user": {
                        "client-certificate": str(pki / f"kubelet-{node.name}.crt"),
                        "client-key": str(pki / f"kubelet-{node.name}.key"),
                    },
                }
            ],
            "contexts": [{"name": "node", "context": {"cluster": "grpo-local", "user": node.name}}],
            "current-context": "node",
        },
        sort_keys=False,
    )


def containerd_config(dirs: NodeDirs, runc: str, cni_bin: str, pause_ref: str) -> str:
    """containerd v1.6, config version 2: state under /run/containerd (the node's own, bound),
    content under the node's directory, runc with cgroupfs (crun fails on this hybrid cgroup
    layout), oom_score_adj kept within what root without CAP_SYS_RESOURCE may set, the CNI
    configuration of this node, our pause image, and no optional snapshotter or service."""
    cni_conf = dirs.etc / "cni"
    return f"""version = 2
root = "{dirs.containerd_root}"
state = "/run/containerd"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "/run/containerd/containerd.sock"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{dirs.base / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
"""


def cni_config(node: RealNode) -> dict[str, Any]:
    """The node's pod network: a bridge in the node's namespace that is the pods' gateway, and
    host-local addresses from the node's pod CIDR; no masquerading (every pod address is routed)."""
    return {
        "cniVersion": "0.4.0",
        "name": "grpo-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def boot_script(
    node: RealNode,
    dirs: NodeDirs,
    *,
    containerd: str,
    kubelet: list[str],
    device_plugin: list[str] | None,
    network_policy: list[str] | None = None,
) -> str:
    """What runs first in the node's fresh mount and UTS namespaces (inside its network namespace):
    its hostname, its own copies of the fixed host paths and kernel tunables, then containerd, the
    device plugin, the NetworkPolicy agent (netpolicy.py), and the kubelet as the
    node's main process."""
    lines = [
        "set -eu",
        f"hostname {node.name}",
        # The host's named network namespaces (and the node's own) are not this node's business.
        "umount -l /run/netns 2>/dev/null || true",
        "mkdir -p /run/netns && mount -t tmpfs -o mode=755 tmpfs /run/netns",
    ]
    for target in NODE_MOUNTS:
        lines.append(f"mount --bind {dirs.mount_source(target)} {target}")
    for name in KERNEL_TUNABLES:
        lines.append(f"mount --bind {dirs.tunable(name)} /proc/sys/{name}")
    lines += [
        "echo 1 > /proc/sys/net/ipv4/ip_forward",  # this namespace's own: it routes its pods
        # A node booted again (a machine that rebooted) finds its last containerd's socket on its disk: gone
        # first, so the wait below waits for the new containerd, not a dead file the kubelet cannot dial.
        "rm -f /run/containerd/containerd.sock",
        f"{containerd} --config {dirs.etc / 'containerd.toml'} >>{dirs.logs / 'containerd.log'} 2>&1 &",
        f"echo $! > {dirs.pidfile('containerd')}",
        "i=0; while [ ! -S /run/containerd/containerd.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
    ]
    if device_plugin:
        lines += [
            f"{' '.join(device_plugin)} >>{dirs.logs / 'device-plugin.log'} 2>&1 &",
            f"echo $! > {dirs.pidfile('device-plugin')}",
        ]
    if network_policy:
        # Restarted when it exits, as the kubelet restarts a DaemonSet's pod: it exits at start while its Node
        # object does not exist yet (the kubelet registers it below).
        lines += [
            f"while :; do {' '.join(network_policy)} >>{dirs.logs / NETWORK_POLICY_LOG} 2>&1 || true; sleep 2; done &",
            f"echo $! > {dirs.pidfile('network-policies')}",
        ]
    lines += [f"echo $$ > {dirs.pidfile('kubelet')}", f"exec {' '.join(kubelet)} >>{dirs.logs / 'kubelet.log'} 2>&1"]
    return "\n".join(lines) + "\n"


def node_ports() -> dict[str, int]:
    """The API server's port as the nodes reach it on the bridge (forwarded to 127.0.0.1)."""
    return {"apiserver": PORTS["apiserver"]}
