"""The job's NetworkPolicy tried from outside while the gang runs: who reaches the Ray head, and on which port.

The local nodes enforce NetworkPolicy (grpo_infra/kube/netpolicy.py), so the run itself proves the
allowed paths (Ray forms across nodes, the submitter reaches the dashboard, the KubeRay operator
follows the job). What a policy must refuse is proven only by trying it: once the job runs, client pods
try the head's GCS, dashboard and metrics ports: one in the job's own namespace (which must reach all
three: it also shows each port listens), one in a namespace of nobody's (on the head's own node, where
two pods share one bridge), which must reach none, and one in the stack's
`kubernetes.monitoringNamespace` (on another node), which must reach the metrics port alone.

Only a connection counts as reached: the enforcing firewall answers a refused connection with a reject
(kube-router v2.1.0 `pkg/controllers/netpol/pod.go`, `-j REJECT`), which the client sees as "refused",
like a port nobody listens on; the job's own namespace is there to tell the two apart.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..job_wait import Kubectl, Say
from ..k8s.access import RAY_METRICS_PORT
from ..k8s.node_loss import DASHBOARD_PORT
from ..kube.nodeimages import TOOLS_REF
from ..spec import Environment

STRANGER = "grpo-rehearsal-stranger"
GCS_PORT = 6379  # the head's GCS (`ray start --port`, KubeRay's default for the head)
PORTS = {GCS_PORT: "GCS", DASHBOARD_PORT: "dashboard", RAY_METRICS_PORT: "metrics"}
CONNECT_S = 3
POD_TIMEOUT_S = 90


class ReachError(Exception):
    """The policy let through what it must refuse, or refused what it must let through (one line)."""


@dataclass(frozen=True)
class Client:
    """One client pod: its namespace, the node it runs on, and the ports it must reach."""

    namespace: str
    node: str
    allowed: frozenset[int]
    why: str


def clients(env: Environment, head_node: str, other_node: str) -> list[Client]:
    """The job's own namespace on another node (every port), a stranger beside the head (none) and, when the
    stack names one, the monitoring namespace on another node (the metrics port only)."""
    out = [
        Client(env.job.tenant, other_node, frozenset(PORTS), "the job's own namespace"),
        Client(STRANGER, head_node, frozenset(), "a namespace the policy does not name"),
    ]
    monitoring = env.kubernetes.monitoring_namespace if env.kubernetes is not None else None
    if monitoring is not None:
        out.append(Client(monitoring, other_node, frozenset({RAY_METRICS_PORT}), "kubernetes.monitoringNamespace"))
    return out


def client_pod(client: Client, address: str) -> dict[str, Any]:
    """A busybox pod (the local nodes' tools image) that tries each port once and prints what happened
    (busybox nc: `-e echo` ends the connection once made; `-w` bounds the connect). Restricted Pod Security,
    so a tenant namespace's admission takes it; no requests, as the rehearsal's scaled pods fill their nodes
    (a BestEffort pod is admitted by the kubelet whatever is left)."""
    tries = " ; ".join(
        f'out=$(nc -w {CONNECT_S} {address} {port} -e echo </dev/null 2>&1) && echo "{port} connected" '
        f'|| {{ case "$out" in *refused*) echo "{port} refused";; *) echo "{port} timed-out";; esac; }}'
        for port in sorted(PORTS)
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "grpo-rehearsal-reach", "namespace": client.namespace},
        "spec": {
            "nodeName": client.node,
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "reach",
                    "image": TOOLS_REF,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", tries],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }


def parse(log: str) -> dict[int, str]:
    """`<port> connected|refused|timed-out` lines → port: outcome."""
    out: dict[int, str] = {}
    for line in log.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].isdigit():
            out[int(words[0])] = words[1]
    return out


def verdict(client: Client, seen: dict[int, str], policy: str) -> str | None:
    """None when every port went as the policy says; else the one line of the first that did not."""
    for port in sorted(PORTS):
        outcome = seen.get(port, "not tried")
        if outcome == "not tried" or (outcome == "connected") != (port in client.allowed):
            must = "must reach" if port in client.allowed else "must not reach"
            return (
                f"NetworkPolicy {policy}: a pod of namespace {client.namespace} ({client.why}) {must} the head's "
                f"port {port} ({PORTS[port]}), and the connection was {outcome}"
            )
    return None


def summary(client: Client, seen: dict[int, str]) -> str:
    return f"from {client.namespace}: " + ", ".join(f"{PORTS[p]} {p} {seen.get(p, 'not tried')}" for p in sorted(PORTS))


def _head(kubectl: Kubectl, ns: str, ray_cluster: str) -> dict[str, Any]:
    pods = json.loads(
        kubectl("get", "pods", "-n", ns, "-l", f"ray.io/cluster={ray_cluster},ray.io/node-type=head", "-o", "json")
    )["items"]
    if not pods or not pods[0].get("status", {}).get("podIP"):
        raise ReachError(f"the head of RayCluster {ns}/{ray_cluster} has no pod address to try")
    return pods[0]


def _run(kubectl: Kubectl, pod: dict[str, Any]) -> str:
    """Create the pod (its namespace first), wait for it to end, return its log; the pod is deleted after."""
    ns = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    kubectl("create", "namespace", ns, check=False)
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        deadline = time.monotonic() + POD_TIMEOUT_S
        while time.monotonic() < deadline:
            status = json.loads(kubectl("get", "pod", name, "-n", ns, "-o", "json"))["status"]
            if status.get("phase") in ("Succeeded", "Failed"):
                if not status.get("containerStatuses"):
                    why = f"{status.get('reason', '')}: {status.get('message', '')}".strip(": ")
                    raise ReachError(f"the client pod {ns}/{name} on {pod['spec']['nodeName']} never ran: {why}")
                return kubectl("logs", name, "-n", ns)
            time.sleep(1)
        raise ReachError(f"the client pod {ns}/{name} did not end within {POD_TIMEOUT_S}s")
    finally:
        kubectl("delete", "pod", name, "-n", ns, "--wait=false", check=False)


def check(env: Environment, kubectl: Kubectl, ray_cluster: str, nodes: list[str], say: Say) -> None:
    """Try the head from each client; raise ReachError with one line at the first port the policy got wrong."""
    ns = env.job.tenant
    head = _head(kubectl, ns, ray_cluster)
    head_node = head["spec"]["nodeName"]
    other = next((n for n in nodes if n != head_node), head_node)
    policy = f"{ns}/{env.job.name}-ray"
    for client in clients(env, head_node, other):
        seen = parse(_run(kubectl, client_pod(client, head["status"]["podIP"])))
        say(f"network policy {policy}: {summary(client, seen)} (client on {client.node})")
        why = verdict(client, seen, policy)
        if why is not None:
            raise ReachError(why)
