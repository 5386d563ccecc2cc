"""What the local Kubernetes runs, computed before anything starts: paths, ports, binaries, the fake
GPU nodes of a stack's pools, and the operators' configuration rewritten for processes on loopback.

Pure functions (files are only read); `cluster.py` carries the plan out.
"""

from __future__ import annotations

import base64
import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..k8s.kueue_config import manager_config
from ..k8s.operators import KUEUE_NAMESPACE
from ..k8s.placement import node_selector, node_taints
from ..spec import Environment
from ..spec.pools import Pool
from .build import binary_path
from .versions import ETCD, KUBE_ROUTER, KUBERAY, KUBERNETES, KUEUE, KWOK, PULUMI, PULUMI_KUBERNETES

# Everything the cluster writes lives here; `down` removes it.
ROOT = Path(os.environ.get("GRPO_KUBE_ROOT", f"/tmp/grpo-kube-{os.getuid()}"))
LOOPBACK = "127.0.0.1"
# Every port binds 127.0.0.1 only; numbers chosen away from the defaults of a real cluster's
# components, so a kind or minikube on the same machine does not collide. GRPO_KUBE_PORT_OFFSET
# shifts them all (e.g. for a second machine user).
_OFFSET = int(os.environ.get("GRPO_KUBE_PORT_OFFSET", "0"))
PORTS = {
    name: port + _OFFSET
    for name, port in {
        "etcd-client": 23790,
        "etcd-peer": 23800,
        "apiserver": 16443,
        "controller-manager": 20257,
        "scheduler": 20259,
        "kueue-webhook": 19443,
        "kueue-health": 18081,
        "kuberay-health": 18082,
        "kwok": 18090,
    }.items()
}
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# Kueue reads its metrics certificate from this fixed path when it does not manage its own
# certificates (sigs.k8s.io/kueue v0.19.2 cmd/kueue/main.go:215-225).
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# KWOK fakes the kubelet of nodes carrying this annotation, and only those.
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# A pod with this label is never reported Ready (for the waitForPodsReady eviction test).
NEVER_READY_LABEL = "grpo-infra.local/never-ready"
CPU_NODE_PREFIX = "grpo-cpu-"
CPU_NODE = f"{CPU_NODE_PREFIX}0"
# More CPU nodes than one only where a test needs a head and its submitter apart (`kube up --cpu-nodes`).
MAX_CPU_NODES = 4


def cpu_node_names(count: int = 1) -> list[str]:
    """The untainted CPU nodes for Ray heads and job submitters: `CPU_NODE` first."""
    if not 1 <= count <= MAX_CPU_NODES:
        raise KubeError(f"the local cluster takes 1 to {MAX_CPU_NODES} CPU nodes, not {count}")
    return [f"{CPU_NODE_PREFIX}{i}" for i in range(count)]


MANAGED_BY = {"app.kubernetes.io/managed-by": "grpo-infra-kube"}


class KubeError(Exception):
    """The local cluster cannot be built or used; the message says what to do."""


@dataclass(frozen=True)
class Tool:
    component: str
    version: str

    @property
    def path(self) -> Path:
        return binary_path(self.component, self.version)


TOOLS = {
    "etcd": Tool("etcd", ETCD),
    "kube-apiserver": Tool("kube-apiserver", KUBERNETES),
    "kube-controller-manager": Tool("kube-controller-manager", KUBERNETES),
    "kube-scheduler": Tool("kube-scheduler", KUBERNETES),
    "kubectl": Tool("kubectl", KUBERNETES),
    "kueue": Tool("kueue", KUEUE),
    "ray-operator": Tool("ray-operator", KUBERAY),
    "kwok": Tool("kwok", KWOK),
    "kube-router": Tool("kube-router", KUBE_ROUTER),
}
PULUMI_TOOLS = {
    "pulumi": Tool("pulumi", PULUMI),
    "pulumi-resource-kubernetes": Tool("pulumi-resource-kubernetes", PULUMI_KUBERNETES),
}


def missing_tools(tools: dict[str, Tool] = TOOLS) -> list[str]:
    return [name for name, tool in tools.items() if not tool.path.is_file()]


def require_tools(tools: dict[str, Tool] = TOOLS) -> None:
    missing = missing_tools(tools)
    if missing:
        raise KubeError(
            f"not built: {' '.join(missing)}. Build them with scripts/build-kube.sh (needs Go; "
            "about an hour cold on 2 cores, cached after)"
        )


def data_dir(name: str) -> Path:
    """The module files copied beside a binary at build time (CRDs, webhooks, KWOK stages)."""
    return TOOLS[name].path.parent.parent / "data"


@dataclass(frozen=True)
class Paths:
    """Where each piece lives under the cluster's root."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "cluster.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def pulumi_home(self) -> Path:
        return self.root / "pulumi-home"

    @property
    def pulumi_state(self) -> Path:
        return self.root / "pulumi-state"

    def config(self, name: str) -> Path:
        return self.root / "etc" / name

    def pidfile(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"


def server_url() -> str:
    return f"https://{LOOPBACK}:{PORTS['apiserver']}"


def kubeconfig(paths: Paths) -> str:
    """A kubeconfig whose only context is the local cluster, authenticated by the admin certificate."""
    pki = paths.pki
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "grpo-local",
                    "cluster": {"server": server_url(), "certificate-authority": str(pki / "ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "grpo-local-admin",
                    "user": {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")},
                }
            ],
            "contexts": [{"name": "grpo-local", "context": {"cluster": "grpo-local", "user": "grpo-local-admin"}}],
            "current-context": "grpo-local",
        },
        sort_keys=False,
    )


# ------------------------------------------------------------------------------------- fake nodes


def pool_hosts(pool: Pool) -> list[str]:
    """The node names of a pool: an existing cluster's hosts, or `<pool>-<i>` for a cloud pool."""
    if pool.host_names:
        return list(pool.host_names)
    return [f"{pool.name}-{i}" for i in range(pool.nodes or 0)]


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]], capacity: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1]},
            "labels": {
                **labels,
                **MANAGED_BY,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def pool_nodes(pool: Pool) -> list[dict[str, Any]]:
    """One fake node per host of the pool, with the pool's labels and taints (the same renderers
    the ResourceFlavor and the RayJob use) and a whole node's capacity."""
    capacity = {
        "cpu": str(pool.cpus),
        "memory": f"{pool.memory_gib}Gi",
        "pods": "110",
        pool.gpu.resource: str(pool.gpu.per_node),
    }
    if pool.fabric.resource and pool.fabric.devices_per_node:
        capacity[pool.fabric.resource] = str(pool.fabric.devices_per_node)
    return [_node(host, node_selector(pool), node_taints(pool), capacity) for host in pool_hosts(pool)]


def fake_nodes(env: Environment, cpu_nodes: int = 1) -> list[dict[str, Any]]:
    """Every pool's GPU nodes, plus the untainted CPU nodes for Ray heads and job submitters."""
    nodes = [n for pool in env.pools for n in pool_nodes(pool)]
    for name in cpu_node_names(cpu_nodes):
        nodes.append(_node(name, {}, [], {"cpu": "64", "memory": "256Gi", "pods": "110"}))
    return nodes


# ---------------------------------------------------------------------------------------- Kueue


def kueue_config(env: Environment, paths: Paths) -> dict[str, Any]:
    """The stack's own Kueue configuration, changed only where a process on loopback must differ
    from a pod: no leader election, our certificates, every endpoint on 127.0.0.1, the cluster's
    kubeconfig. Queueing behaviour (waitForPodsReady, frameworks, ...) is the stack's."""
    cfg = copy.deepcopy(manager_config(env))
    cfg["namespace"] = KUEUE_NAMESPACE
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["internalCertManagement"] = {"enable": False}
    cfg["webhook"] = {"host": LOOPBACK, "port": PORTS["kueue-webhook"], "certDir": str(paths.config("kueue-certs"))}
    cfg["health"] = {"healthProbeBindAddress": f"{LOOPBACK}:{PORTS['kueue-health']}"}
    cfg["metrics"] = {"bindAddress": "0"}
    # Jobs are not Kueue's here: the Job webhook (fail-closed) is not registered locally.
    frameworks = [f for f in cfg["integrations"]["frameworks"] if f.startswith("ray.io/")]
    cfg["integrations"] = {**cfg["integrations"], "frameworks": frameworks}
    return cfg


def _webhook_kept(path: str) -> bool:
    """Only the hooks of Kueue's own kinds and Ray's: a fail-closed hook for Jobs or Pods would block
    the whole cluster whenever the Kueue process is down."""
    return "-kueue-x-k8s-io-" in path or "-ray-io-" in path


def webhook_configurations(manifests: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's generated webhook configurations, pointed at the process on 127.0.0.1."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}", "labels": dict(MANAGED_BY)}
        hooks = []
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            if not _webhook_kept(path):
                continue
            hook["clientConfig"] = {
                "url": f"https://{LOOPBACK}:{PORTS['kueue-webhook']}{path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def conversion_kinds(kustomization: str) -> set[str]:
    """The CRDs (by plural) Kueue converts with its webhook: the `webhook_in_<plural>.yaml` patches its
    CRD kustomization applies (config/components/crd/kustomization.yaml; not every patch file is used)."""
    patches = (yaml.safe_load(kustomization) or {}).get("patches") or []
    paths = [p.get("path", "") if isinstance(p, dict) else str(p) for p in patches]
    return {m[1] for path in paths if (m := re.fullmatch(r"patches/webhook_in_(.+)\.yaml", path))}


def crds(ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's and KubeRay's CRDs from the modules the controllers are built from; Kueue's
    multi-version kinds convert through its webhook on 127.0.0.1."""
    kueue_dir = data_dir("kueue") / "config/components/crd"
    convert = conversion_kinds((kueue_dir / "kustomization.yaml").read_text())
    out = []
    for path in sorted((kueue_dir / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in convert:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://{LOOPBACK}:{PORTS['kueue-webhook']}/convert",
                        "caBundle": base64.b64encode(ca_pem).decode(),
                    },
                },
            }
        out.append(crd)
    for path in sorted((data_dir("ray-operator") / "config/crd/bases").glob("*.yaml")):
        out.append(yaml.safe_load(path.read_text()))
    return out


# ----------------------------------------------------------------------------------------- KWOK


def kwok_stages() -> str:
    """KWOK's own fast node and pod stages (Nodes Ready with heartbeats, pods Running and Ready with
    IPs, Job pods Succeeded, deletions finished), except that a pod labelled NEVER_READY_LABEL
    stays Pending: the stand-in for a node that never gets its pod ready."""
    docs = []
    for stage_dir in ("node/fast", "node/heartbeat", "pod/fast"):
        for path in sorted((data_dir("kwok") / "kustomize/stage" / stage_dir).glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            stage = yaml.safe_load(path.read_text())
            if stage.get("kind") != "Stage":
                continue
            if stage["metadata"]["name"] == "pod-ready":
                stage["spec"]["selector"].setdefault("matchExpressions", []).append(
                    {"key": f'.metadata.labels["{NEVER_READY_LABEL}"]', "operator": "DoesNotExist"}
                )
            docs.append(stage)
    return yaml.safe_dump_all(docs, sort_keys=False)
