"""NetworkPolicy enforced on the real nodes: kube-router's firewall, one agent per node.

The local pod network is the CNI `bridge` plugin, which enforces nothing; a policy the API server
accepts would then prove nothing. Each real node runs cloudnativelabs/kube-router v2.1.0 (built from
its Go module by scripts/build-kube.sh, upstream's own `cmd/kube-router` unchanged) with only its
NetworkPolicy controller on (`--run-firewall`; no routing, no service proxy, no CNI): upstream's own
firewall-only deployment (`daemonset/kube-router-firewall-daemonset.yaml`).

Why this agent. kube-network-policies (kind's own, sigs.k8s.io/kube-network-policies v0.8.0) was
tried first: it hands each new connection to an nfqueue through nftables' `queue` expression, which
kernels built without CONFIG_NFT_QUEUE refuse ("syncing nftables rules: netlink receive: no such file
or directory"; `nft add rule ... queue num 100` fails the same way on such a machine). kube-router's
controller needs what every distribution kernel has: iptables (xt) targets and matches, ipset, and
br_netfilter with `-m physdev --physdev-is-bridged` for traffic between two pods of one bridge
(`pkg/controllers/netpol/pod.go`). Calico and Cilium need a datastore or eBPF and much more to build.
The module proxy serves kube-router v2.1.0 only, for which security flaws are reported; it runs here
inside the lab's own namespaces, never in anything grpo-infra renders.

It runs like the kubelet, as a process of the node (killed with it, booted with it), reading the API
with a ServiceAccount token of its own (a kubeconfig in the node's directory) under upstream's RBAC
(`daemonset/generic-kuberouter-only-advertise-routes.yaml`, ClusterRole `kube-router`, read verbs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .versions import KUBE_ROUTER

NAME = "kube-router"
NAMESPACE = "kube-system"
# The token outlives any rehearsal or test session (the API server caps nothing: no
# --service-account-max-token-expiration is set).
TOKEN_DURATION = "48h"
LOG = "network-policies.log"


def rbac() -> list[dict[str, Any]]:
    """The agent's ServiceAccount, ClusterRole (upstream's read rules; not the leases and services/status
    its router and proxy write) and binding."""
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                    "verbs": read,
                },
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
    ]


def token_request() -> list[str]:
    """kubectl's arguments that print a token of the agent's ServiceAccount (the TokenRequest API)."""
    return ["create", "token", NAME, "-n", NAMESPACE, f"--duration={TOKEN_DURATION}"]


def write_kubeconfig(path: Path, server: str, ca: Path, token: str) -> Path:
    """The agent's kubeconfig: the API server on the bridge, the cluster's CA, the ServiceAccount's token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": NAME, "user": {"token": token.strip()}}],
        "contexts": [{"name": NAME, "context": {"cluster": "local", "user": NAME}}],
        "current-context": NAME,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def agent_argv(binary: Path, node_name: str, kubeconfig: Path, service_cidr: str) -> list[str]:
    """The agent of one node: the firewall alone, as upstream's firewall daemonset runs it, with no health
    or metrics port (nothing here reads them)."""
    return [
        str(binary),
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node_name}",
        f"--service-cluster-ip-range={service_cidr}",
        "--health-port=0",
        "--metrics-port=0",
        "--v=1",
    ]


def version() -> str:
    return f"{NAME} {KUBE_ROUTER} (firewall only)"
