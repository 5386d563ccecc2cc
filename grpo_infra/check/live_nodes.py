"""The worker's request against the real Nodes of a running cluster, when `check` is given a kubeconfig.

The project's model of a node's allocatable (`grpo_infra.k8s.allocatable`) is an estimate; a running
cluster knows the real number: each Node's `status.allocatable`, which the kubelet computes from the
kernel's MemTotal less its own reservations (Kubernetes docs, "Reserve Compute Resources for System
Daemons", https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/#node-allocatable).
A worker plus the stack's DaemonSets must fit the smallest node of its pool, or the gang never starts.

The Nodes are read with `kubectl get nodes -o json`, so every credential plugin a kubeconfig may name
(EKS's `aws eks get-token`, GKE's `gke-gcloud-auth-plugin`) works unchanged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from ..k8s.placement import node_share, parse_quantity
from ..nodepools.charts import daemonset_requests
from ..spec import ENVIRONMENT_KEY, Environment
from ..spec.pools import Pool
from .violation import Violation

KUBECTL_TIMEOUT_S = 60


class ClusterUnreadable(RuntimeError):
    """The kubeconfig's cluster did not answer `kubectl get nodes`; the message is kubectl's."""


def read_nodes(kubeconfig: Path, kubectl: str) -> list[dict[str, Any]]:
    """Every Node of the cluster the kubeconfig's current context names, read with the `kubectl` given
    (the caller finds one: rules do not reach into the local cluster's tools)."""
    if not kubeconfig.is_file():
        raise ClusterUnreadable(f"kubeconfig {kubeconfig} does not exist")
    proc = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise ClusterUnreadable(f"kubectl get nodes ({kubeconfig}): {message[-1] if message else 'failed'}")
    return list(json.loads(proc.stdout).get("items", []))


def pool_nodes(pool: Pool, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Nodes of `pool`: its hosts by name on an existing cluster, else the Nodes carrying its labels."""
    if pool.host_names:
        hosts = set(pool.host_names)
        return [n for n in nodes if n["metadata"]["name"] in hosts]
    return [n for n in nodes if pool.labels and pool.labels.items() <= n["metadata"].get("labels", {}).items()]


def _allocatable(node: dict[str, Any]) -> tuple[float, float]:
    """(cores, bytes) the Node reports allocatable."""
    status = node.get("status", {}).get("allocatable", {})
    return parse_quantity(status.get("cpu", "0")), parse_quantity(status.get("memory", "0"))


def live_violations(env: Environment, nodes: list[dict[str, Any]]) -> list[Violation]:
    """The gang's pool against the real Nodes: every host exists, and the worker plus the DaemonSets fits
    the smallest node's allocatable."""
    index, pool = next((i, p) for i, p in enumerate(env.pools) if p.name == env.gang.pool.name)
    where = f"{ENVIRONMENT_KEY}.pools[{index}]"
    found = pool_nodes(pool, nodes)
    out: list[Violation] = []
    missing = sorted(set(pool.host_names) - {n["metadata"]["name"] for n in found})
    if missing:
        out.append(
            Violation(
                "pool-nodes-exist",
                f"{where}.hosts",
                f"{', '.join(missing)} {'is not a Node' if len(missing) == 1 else 'are not Nodes'} of the cluster "
                "the kubeconfig names",
                f"{len(missing)} of {pool.node_count} hosts",
            )
        )
    if not found:
        return out
    share = node_share(env, pool)
    daemons = daemonset_requests(env, pool)
    need_cpu = (share.cpu_milli + sum(d[1] for d in daemons)) / 1000
    need_memory = (share.memory_mi + sum(d[2] for d in daemons)) * 2**20
    smallest = min(found, key=lambda n: _allocatable(n)[1])
    cpu, memory = _allocatable(smallest)
    name = smallest["metadata"]["name"]
    if need_memory > memory:
        out.append(
            Violation(
                "pod-fits-real-node",
                f"{where}.kernelMemoryGib",
                f"the worker and the stack's DaemonSets ask for {need_memory / 2**30:.1f} GiB memory, but Node "
                f"{name} has {memory / 2**30:.1f} GiB allocatable: set kernelMemoryGib to the Node's "
                f"status.capacity.memory (or raise kubernetes.nodeReserve)",
                f"{(need_memory - memory) / 2**30:.1f} GiB",
            )
        )
    if need_cpu > cpu + 1e-9:
        out.append(
            Violation(
                "pod-fits-real-node",
                f"{where}.cpus",
                f"the worker and the stack's DaemonSets ask for {need_cpu:g} CPUs, but Node {name} has {cpu:g} "
                "allocatable",
                f"{need_cpu - cpu:g} CPUs",
            )
        )
    return out


def live_arithmetic(env: Environment, nodes: list[dict[str, Any]]) -> list[str]:
    """The real Nodes of the gang's pool, for `check --explain`: each one's allocatable."""
    pool = env.gang.pool
    lines = [f"real Nodes of pool {pool.name} (status.allocatable):"]
    for node in pool_nodes(pool, nodes):
        cpu, memory = _allocatable(node)
        lines.append(f"  {node['metadata']['name']:<26} {memory / 2**30:>10.1f} GiB   {cpu:g} CPUs")
    if len(lines) == 1:
        lines.append("  none found")
    return lines
