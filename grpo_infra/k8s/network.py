"""Which network the worker pods' NCCL and Gloo sockets use, and what host networking then needs.

A pod without `hostNetwork` has its own network namespace: the host's NICs (`ens1f0np0`, ...) do not
exist in it, only `eth0` (and `net1`, ... for each Multus attachment). Pointing NCCL_SOCKET_IFNAME or
GLOO_SOCKET_IFNAME at a host NIC there makes NCCL's bootstrap and Gloo fail before the first step.
The RDMA devices themselves (NCCL_IB_HCA) are handed to the pod by the device plugin, not by the
network namespace, so they keep the pool's HCA names.

With `hostNetwork: true` the workers' Ray ports are bound on the host, next to whatever else runs
there: each job takes its own port block (`grpo_infra.ports`, the same arithmetic as on Slurm).
"""

from __future__ import annotations

from typing import Any

from ..fabric import nccl_env
from ..image import image_reference
from ..lifecycle.ray_node import ephemeral_ports_function
from ..ports import RayPorts, ray_ports
from ..spec import Environment
from ..spec.pools import Pool
from ..watchdog import watchdog_env

SOCKET_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
# Interfaces no other node can reach. NCCL_SOCKET_IFNAME takes prefixes, `^` to exclude, `=` for exact
# names (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname); unset, NCCL
# leaves out only `lo` and `docker*`. An EKS node also has the Pod Identity agent's link-local
# `pod-id-link0` (169.254.170.23): a host-network pod whose NCCL falls back to sockets picks it and the
# bootstrap hangs (aws-samples/aws-do-eks issues #54, #63). Never named; excluded when nothing is named.
LINK_LOCAL_PREFIXES = ("lo", "docker", "pod-id-link", "veth")
SOCKET_FALLBACK = "^" + ",".join(LINK_LOCAL_PREFIXES)
# Multus reads the pod's attachments from this annotation (k8snetworkplumbingwg/multus-cni,
# docs/how-to-use.md: "k8s.v1.cni.cncf.io/networks").
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def host_networking(env: Environment) -> bool:
    assert env.kubernetes is not None
    return env.kubernetes.network.mode == "host"


def socket_interfaces(env: Environment, pool: Pool | None = None) -> list[str]:
    """The interfaces NCCL and Gloo may use inside a worker pod of `pool` (default: the gang's)."""
    assert env.kubernetes is not None
    inside = env.kubernetes.network.socket_interface()
    return [inside] if inside is not None else list((pool or env.gang.pool).fabric.interfaces)


def worker_nccl_env(env: Environment, pool: Pool | None = None) -> list[tuple[str, str]]:
    """The pool's NCCL variables and torch's watchdog (grpo_infra/watchdog.py) with the socket interfaces of the pod's network, not the host's
    (`pool`: a disaggregated role's pool; default the gang's)."""
    pool = pool or env.gang.pool
    fabric = [*((k, v) for k, v in nccl_env(pool) if k not in SOCKET_VARIABLES), *watchdog_env(env)]
    names = ",".join(socket_interfaces(env, pool))
    if not names:
        # Nothing named (host networking, no `fabric.interfaces`): every interface but the unreachable ones.
        # Gloo takes names only, no exclusions, so it keeps its own choice (the hostname's address).
        return [*fabric, ("NCCL_SOCKET_IFNAME", SOCKET_FALLBACK)]
    return [*fabric, ("NCCL_SOCKET_IFNAME", "=" + names), ("GLOO_SOCKET_IFNAME", names)]


def link_local(name: str) -> bool:
    """Is `name` an interface no other node reaches (loopback, a container bridge, EKS's pod-id-link0)?"""
    return name.startswith(LINK_LOCAL_PREFIXES)


def host_ports(env: Environment) -> RayPorts | None:
    """The job's Ray port block on the host under host networking; None otherwise."""
    assert env.kubernetes is not None
    start = env.kubernetes.network.host_port_start
    if start is None:
        return None
    size = env.gang.pool.ray_block_size
    return ray_ports(start, start + size - 1, 0, size)


# Ray's worker ports in a pod with a network of its own: `ray start`'s defaults for --min-worker-port and
# --max-worker-port (ray/scripts/scripts.py, Ray 2.60), as the job's rayStartParams name none there.
POD_WORKER_PORTS = (10002, 19999)
PORTS_CONTAINER = "ray-ports"
# Reads two files under /proc: the smallest request.
PORTS_CPU = "100m"
PORTS_MEMORY = "64Mi"


def checked_ports(env: Environment, host_network: bool) -> tuple[int, int]:
    """The ports of a pod's Ray the node's kernel must not hand out: the job's host block on the host
    network, Ray's default worker range in a pod network."""
    ports = host_ports(env) if host_network else None
    return (ports.gcs, ports.max_worker) if ports is not None else POD_WORKER_PORTS


def ray_ports_container(env: Environment, host_network: bool) -> dict[str, Any]:
    """The init container that runs the lifecycle's `ray_ports_clear` (grpo_infra/lifecycle/ephemeral_ports.sh.j2)
    in the pod's own network namespace, before `ray start`: the node's (host network) or the pod's
    net.ipv4.ip_local_port_range against the pod's Ray ports; a failure keeps the pod from starting, its
    one line in the log and `kubectl describe` (FallbackToLogsOnError)."""
    low, high = checked_ports(env, host_network)
    script = ephemeral_ports_function() + (
        'why=$(ray_ports_clear "$GRPO_NODE_NAME" "$1" "$2") || { printf "grpo: ERROR: %s\\n" "$why" >&2; exit 1; }\n'
    )
    limits = {"cpu": PORTS_CPU, "memory": PORTS_MEMORY}
    return {
        "name": PORTS_CONTAINER,
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", "-c", script, PORTS_CONTAINER, str(low), str(high)],
        "env": [{"name": "GRPO_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": limits, "limits": limits},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def worker_ray_start_params(env: Environment) -> dict[str, str]:
    """`ray start` options of a worker: the job's host ports under host networking, none otherwise."""
    ports = host_ports(env)
    if ports is None:
        return {}
    return {
        "node-manager-port": str(ports.node_manager),
        "object-manager-port": str(ports.object_manager),
        "runtime-env-agent-port": str(ports.runtime_env_agent),
        "dashboard-agent-grpc-port": str(ports.dashboard_agent_grpc),
        "dashboard-agent-listen-port": str(ports.dashboard_agent_http),
        "metrics-export-port": str(ports.metrics_export),
        "min-worker-port": str(ports.min_worker),
        "max-worker-port": str(ports.max_worker),
    }


def metrics_ports(env: Environment, pod_default: int) -> list[int]:
    """Where the job's Ray pods export metrics: `pod_default` (KubeRay's `--metrics-export-port` when
    rayStartParams name none) on the head, and on the workers too unless they run on the host network,
    where their `--metrics-export-port` is the job's block's (`worker_ray_start_params`)."""
    ports = host_ports(env)
    return sorted({pod_default} | ({ports.metrics_export} if ports is not None else set()))


def worker_pod_network(env: Environment) -> dict[str, Any]:
    """Pod-spec fields of the worker's network: host networking (with the DNS policy that keeps cluster
    names resolvable), or nothing."""
    if not host_networking(env):
        return {}
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}


def worker_annotations(env: Environment) -> dict[str, str]:
    """The Multus attachment of a secondary network; none otherwise."""
    assert env.kubernetes is not None
    attachment = env.kubernetes.network.attachment
    return {MULTUS_ANNOTATION: attachment} if attachment else {}
