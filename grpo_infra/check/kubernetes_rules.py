"""Kubernetes feasibility, judged on the objects the stack would apply.

The rules themselves live with the validators (`grpo_infra.validate.rules`: KubeRay's and Kueue's
webhook rules, Kueue's flavor and quota assignment); here their findings are tied back to the spec
field a platform engineer has to change.
"""

from __future__ import annotations

import re
from typing import Any

from ..k8s import objects
from ..k8s.allocatable import Allocatable, UnknownMachine, extra_reserve, head_allocatable, pool_allocatable
from ..k8s.kinds import RAY_KINDS, gang_view, with_gang_views
from ..k8s.network import SOCKET_VARIABLES, host_ports, link_local, socket_interfaces
from ..k8s.placement import parse_quantity
from ..k8s.pod_security import ENFORCE_LABEL, LEVELS, baseline_failures, job_pods, pod_level, restricted_failures
from ..spec import ENVIRONMENT_KEY, Environment
from ..validate.rules import admission_errors, rayjob_errors
from .kind_rules import webhook_name_limit
from .paths import unshared
from .slurm_rules import EPHEMERAL_PORTS
from .violation import Violation

ENV = ENVIRONMENT_KEY
K8S = f"{ENV}.kubernetes"
# The highest TCP port.
LAST_PORT = 65535
# Kueue frees a finished job's quota at once; KubeRay deletes its pods only after this many seconds.
MAX_TTL_SECONDS = 60
EKS_LAYER_3 = "topology.k8s.aws/network-node-layer-3"


def kubernetes_violations(env: Environment) -> list[Violation]:
    """Webhook rules, Kueue admission (quota, taints, node labels) and per-node fit of every worker pod."""
    rendered = objects(env)
    # Every kind as the RayJob-shaped gang Kueue admits (`grpo_infra.k8s.kinds`): one rule for all three.
    jobs = [gang_view(o) for o in rendered if o["kind"] in RAY_KINDS]
    tenant_index = next(i for i, t in enumerate(env.tenants) if t.name == env.job.tenant)
    limit = webhook_name_limit(env)
    out = [Violation("kuberay-webhook", f"{ENV}.job.name", e) for job in jobs for e in rayjob_errors(job, limit)]
    out += [
        Violation("kueue-admission", f"{ENV}.tenants[{tenant_index}].gpuQuota", e, _shortfall(e))
        for e in admission_errors(with_gang_views(rendered))
    ]
    for job in jobs:
        out += _worker_fit(env, job)
        out += _head_fit(env, job)
        out += _paths_on_volumes(env, job)
        out += _socket_interfaces(env, job)
        out += _link_local_interfaces(env, job)
        out += _device_host_paths(env, job)
        out += _ttl(env, job)
        out += _resources_provided(env, job)
        out += _pod_security(env, job, [o for o in rendered if o["kind"] == "Namespace"])
    out += _pool_taint(env)
    out += _machine_shapes(env)
    out += _head_pool_capacity(env)
    out += _eks_topology(env)
    out += _host_ports(env)
    out += _capacity_block_walltime(env)
    out += _gke_driver(env)
    out += _eks_driver(env)
    return out


def _shortfall(message: str) -> str:
    """`quota too small (cpu 752 > 376, ...)` → `cpu 376, ...`: the first flavor's shortfall per resource."""
    first = message.split("; flavor ")[0]
    parts = []
    for resource, need, have in re.findall(r"([A-Za-z0-9./-]+) ([\d.e+]+) > ([\d.e+]+)", first):
        short = float(need) - float(have)
        parts.append(f"{resource} {short / 2**30:.0f}Gi" if resource == "memory" else f"{resource} {short:g}")
    return ", ".join(parts)


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in pod.get("containers", []):
        for resource, value in container.get("resources", {}).get("requests", {}).items():
            total[resource] = total.get(resource, 0.0) + parse_quantity(value)
    return total


def _room(env: Environment, allocatable: Allocatable, daemons: list[tuple[str, int, int]]) -> tuple[int, int, str]:
    """(millicores, MiB) left for a pod after the stack's DaemonSets and `nodeReserve`, and the arithmetic."""
    extra_cpu, extra_memory = extra_reserve(env)
    ds_cpu, ds_memory = sum(d[1] for d in daemons), sum(d[2] for d in daemons)
    cpu = allocatable.cpu_milli - ds_cpu - extra_cpu
    memory = allocatable.memory_mi - ds_memory - extra_memory
    words = (
        f"allocatable {allocatable.explain()}; minus the stack's DaemonSets ({ds_cpu}m, {ds_memory} MiB) and "
        f"nodeReserve ({extra_cpu}m, {extra_memory} MiB) leaves {cpu / 1000:g} CPUs, {memory / 1024:.1f} GiB"
    )
    return cpu, memory, words


def _over(need: dict[str, float], cpu_milli: int, memory_mi: int) -> list[tuple[str, str]]:
    """(resource, shortfall) where the pod asks for more than the room."""
    out = []
    if need.get("cpu", 0.0) * 1000 > cpu_milli + 0.5:
        out.append(("cpu", f"{need['cpu'] - cpu_milli / 1000:g} CPUs"))
    if need.get("memory", 0.0) > memory_mi * 2**20:
        out.append(("memory", f"{(need['memory'] - memory_mi * 2**20) / 2**30:.1f} GiB"))
    return out


def _worker_fit(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """Each worker pod, with the DaemonSets the stack puts on its node, fits the node's allocatable as the
    provider computes it (`grpo_infra.k8s.allocatable`): otherwise Kueue admits a gang whose pods stay
    Pending, and waitForPodsReady evicts and requeues it forever."""
    from ..nodepools.charts import daemonset_requests

    out = []
    for group in job["spec"]["rayClusterSpec"].get("workerGroupSpecs", []):
        pod = group["template"]["spec"]
        selector = pod.get("nodeSelector", {})
        index, pool = next(
            ((i, p) for i, p in enumerate(env.pools) if p.labels and p.labels.items() <= selector.items()),
            (None, None),
        )
        if pool is None:
            continue
        where = f"{ENV}.pools[{index}]"
        try:
            allocatable = pool_allocatable(env, pool.name)
        except UnknownMachine as exc:
            out.append(Violation("pod-fits-node", f"{where}.eks.maxPods", str(exc)))
            continue
        cpu, memory, words = _room(env, allocatable, daemonset_requests(env, pool))
        need = _requests(pod)
        for resource, short in _over(need, cpu, memory):
            asked = f"{need[resource]:g} CPUs" if resource == "cpu" else f"{need[resource] / 2**30:.1f} GiB"
            out.append(
                Violation(
                    "pod-fits-node",
                    where,
                    f"a {group['groupName']} pod asks for {asked} {resource}; a node of {pool.name}: {words}",
                    short,
                )
            )
    return out


def _head_fit(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """The head pod fits a node of the head pool (and the submitter fits beside it or on another node)."""
    assert env.kubernetes is not None
    try:
        allocatable = head_allocatable(env)
    except UnknownMachine as exc:
        return [Violation("head-fits-node", f"{K8S}.headPool.eks.maxPods", str(exc))]
    if allocatable is None:
        return []
    cpu, memory, words = _room(env, allocatable, [])
    pods = job_pods(job)
    out = []
    for role in ("head", "submitter"):
        need = _requests(pods.get(role, {}))
        for resource, short in _over(need, cpu, memory):
            out.append(
                Violation(
                    "head-fits-node",
                    f"{K8S}.headPool",
                    f"the {role} pod asks for more {resource} than a head node gives: {words}",
                    short,
                )
            )
    return out


def _machine_shapes(env: Environment) -> list[Violation]:
    """A pool's `cpus`/`memoryGib` are those of its machine type, where the project knows the type: a pool
    claiming more sizes a worker no node can hold."""
    from ..k8s.allocatable import MACHINE_SHAPES

    assert env.kubernetes is not None
    declared: list[tuple[str, str | None, int, int]] = []
    for i, pool in enumerate(env.pools):
        machine = pool.eks.instance_type if pool.eks else pool.gke.machine_type if pool.gke else None
        declared.append((f"{ENV}.pools[{i}]", machine, pool.cpus, pool.memory_gib))
    head = env.kubernetes.head_pool
    if head is not None:
        machine = head.eks.instance_type if head.eks else head.gke.machine_type if head.gke else None
        declared.append((f"{K8S}.headPool", machine, head.cpus, head.memory_gib))
    out = []
    for where, machine, cpus, memory in declared:
        if machine not in MACHINE_SHAPES or MACHINE_SHAPES[machine] == (cpus, memory):
            continue
        real_cpus, real_memory = MACHINE_SHAPES[machine]
        out.append(
            Violation(
                "machine-shape",
                where,
                f"a {machine} has {real_cpus} vCPUs and {real_memory} GiB; the stack says {cpus} and {memory}",
                f"{max(cpus - real_cpus, 0)} CPUs, {max(memory - real_memory, 0)} GiB",
            )
        )
    return out


def _pool_taint(env: Environment) -> list[Violation]:
    """The gang's pool keeps every pod but the workers off its nodes with a taint.

    Each worker asks for a whole node's allocatable, so one other pod on a GPU node leaves a worker
    Pending. Without a taint nothing keeps them off: Kueue gives the head and the submitter the pool's
    flavor whenever its quota has room for them (its first scan takes the first flavor that fits, and
    the pool's is listed first; Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go
    findFlavorForPodSets), a flavor without node labels sends them anywhere, and pods Kueue never sees
    (other teams', system ones) are placed by the scheduler alone. EKS and GKE pools are refused
    without their GPU taint already (grpo_infra/spec/pools.py); this covers existing clusters.
    """
    index, pool = next((i, p) for i, p in enumerate(env.pools) if p.name == env.gang_pool_name)
    if any(t.effect in ("NoSchedule", "NoExecute") for t in pool.taints):
        return []
    return [
        Violation(
            "gpu-pool-taint",
            f"{ENV}.pools[{index}].taints",
            f"pool {pool.name} has no NoSchedule taint: the Ray head, the submitter or any other pod can be "
            "placed on its nodes, and a worker sized to a whole node then stays Pending; add one "
            '(e.g. {key: nvidia.com/gpu, value: "true", effect: NoSchedule}), the workers tolerate it',
        )
    ]


def _head_pool_capacity(env: Environment) -> list[Violation]:
    """The tenants' queues together admit no more heads than the head pool holds."""
    from ..k8s.queues import head_slots, heads_the_pool_holds

    held = heads_the_pool_holds(env)
    if held is None:
        return []
    admitted = sum(head_slots(env, t) for t in env.tenants)
    job_tenant = env.tenant(env.job.tenant)
    if held == 0 or admitted > held or head_slots(env, job_tenant) == 0:
        return [
            Violation(
                "head-pool-capacity",
                f"{K8S}.headPool.nodes",
                f"the head pool holds {held} head+submitter pair(s) at once, but the tenants' queues need "
                f"{max(admitted, 1)} (one per tenant at least): a head admitted beyond that stays Pending",
                f"{max(admitted, 1) - held} pair(s)",
            )
        ]
    return []


def _paths_on_volumes(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """The model, the data and the checkpoint directory lie on a volume mounted in the head and every worker:
    the image's own file system holds none of them, and each pod has its own."""
    out = []
    for role, pod in job_pods(job).items():
        if role == "submitter":
            continue
        container = pod["containers"][0]
        mounts = [m["mountPath"] for m in container.get("volumeMounts", []) if m["mountPath"] != "/dev/shm"]
        for field, path in unshared(env, mounts):
            out.append(
                Violation(
                    "path-on-volume",
                    f"{ENV}.{field}",
                    f"{path} is on no volume of the {role} pod (mounted: {', '.join(mounts) or 'none'}); "
                    "add a `kubernetes.volumes` entry mounted above it",
                )
            )
    return out


def _socket_interfaces(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME inside a pod without host networking may only name the pod's
    own interfaces: a host NIC does not exist in the pod's network namespace."""
    allowed = set(socket_interfaces(env))
    out = []
    for role, pod in job_pods(job).items():
        if pod.get("hostNetwork"):
            continue
        for container in pod.get("containers", []):
            for var in container.get("env", []):
                if var["name"] not in SOCKET_VARIABLES or "value" not in var:
                    continue
                names = [n for n in var["value"].lstrip("=^").split(",") if n]
                stray = [n for n in names if n not in allowed]
                if stray:
                    out.append(
                        Violation(
                            "pod-socket-interface",
                            f"{K8S}.network",
                            f"the {role} pod sets {var['name']}={var['value']}, but without hostNetwork its "
                            f"interfaces are {', '.join(sorted(allowed))}: {', '.join(stray)} does not exist there",
                        )
                    )
    return out


def _ttl(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """Under Kueue the quota is free the moment the job finishes; GPU pods kept longer collide with the next gang."""
    ttl = job["spec"].get("ttlSecondsAfterFinished", 0)
    if not job["spec"].get("suspend") or ttl <= MAX_TTL_SECONDS:
        return []
    return [
        Violation(
            "ttl-after-finish",
            f"{K8S}.rayJob.ttlSecondsAfterFinished",
            f"KubeRay keeps the finished job's GPU pods {ttl} s, but Kueue frees its quota at once: the next gang "
            f"is admitted onto full nodes and evicted by waitForPodsReady (at most {MAX_TTL_SECONDS} s)",
            f"{ttl - MAX_TTL_SECONDS} s",
        )
    ]


def advertised_resources(env: Environment) -> dict[str, str]:
    """Extended resource → what advertises it: the stack's device plugins, GKE itself, or the cluster."""
    from ..nodepools.charts import device_plugin_releases
    from ..nodepools.rdma import rdma_pools

    assert env.kubernetes is not None
    out = {r: "the cluster (providedResources)" for r in env.kubernetes.provided_resources}
    releases = {r["name"] for r in device_plugin_releases(env)}
    if env.kubernetes.provider == "gke":
        out["nvidia.com/gpu"] = "GKE's device plugin"
    if "nvidia-device-plugin" in releases or "gpu-operator" in releases:
        out["nvidia.com/gpu"] = "the stack's NVIDIA device plugin"
    if "aws-efa-k8s-device-plugin" in releases:
        out["vpc.amazonaws.com/efa"] = "the stack's EFA device plugin"
    for pool in rdma_pools(env):
        if pool.fabric.resource:
            out[pool.fabric.resource] = "the stack's RDMA shared device plugin"
    return out


def _resources_provided(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """Every extended resource a pod requests is advertised by something, or the pod stays Pending forever."""
    known = advertised_resources(env)
    out = []
    for role, pod in job_pods(job).items():
        for resource in _requests(pod):
            if "/" in resource and resource not in known:
                out.append(
                    Violation(
                        "resource-provided",
                        f"{K8S}.providedResources",
                        f"the {role} pod requests {resource}, which nothing advertises: install its device plugin "
                        "from the stack (e.g. existing.installRdmaDevicePlugin) or list it in providedResources",
                    )
                )
    return out


def _pod_security(env: Environment, job: dict[str, Any], namespaces: list[dict[str, Any]]) -> list[Violation]:
    """The enforced level admits the job's pods (a stricter label makes the API server refuse them)."""
    ns = next((n for n in namespaces if n["metadata"]["name"] == job["metadata"]["namespace"]), None)
    level = ns["metadata"].get("labels", {}).get(ENFORCE_LABEL) if ns else None
    if level is None:
        return []
    out = []
    for role, pod in job_pods(job).items():
        needs = pod_level(pod)
        if LEVELS.index(needs) > LEVELS.index(level):
            why = baseline_failures(pod) if level == "baseline" else restricted_failures(pod) + baseline_failures(pod)
            out.append(
                Violation(
                    "pod-security",
                    f"{K8S}.podSecurity",
                    f"namespace {ns['metadata']['name']} enforces {level}, but the {role} pod needs {needs} "
                    f"({'; '.join(why)})",
                )
            )
    return out


def _eks_topology(env: Environment) -> list[Violation]:
    """On EKS the most selective network level is layer 3 (the switch nearest the instance); a topology of
    layers 1-2 only lets Kueue spread a gang over layer-3 switches it could have shared
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html; EKS labels nodes
    topology.k8s.aws/network-node-layer-1..3)."""
    assert env.kubernetes is not None
    topology = env.kubernetes.topology
    if env.kubernetes.provider != "eks" or topology is None:
        return []
    uses_layers = any(lv.startswith("topology.k8s.aws/network-node-layer-") for lv in topology.levels)
    if uses_layers and EKS_LAYER_3 not in topology.levels:
        return [
            Violation(
                "eks-topology-layer-3",
                f"{K8S}.topology.levels",
                f"the topology stops above {EKS_LAYER_3}, EKS's most selective network level; add it after "
                "network-node-layer-2 so Kueue packs the gang under one layer-3 switch",
            )
        ]
    return []


def _host_ports(env: Environment) -> list[Violation]:
    """With hostNetwork the workers' Ray ports are host ports: the block, sized from the pool's nodes, ends
    at the last port (65535) and stays out of the ephemeral range."""
    assert env.kubernetes is not None
    start, size = env.kubernetes.network.host_port_start, env.gang.pool.ray_block_size
    if start is not None and start + size - 1 > LAST_PORT:
        return [
            Violation(
                "host-ports-block",
                f"{K8S}.network.hostPortStart",
                f"the job's host port block {start}-{start + size - 1} ({size} ports, sized from pool "
                f"{env.gang.pool.name}'s {env.gang.pool.cpus} CPUs and {env.gang.pool.gpu.per_node} GPUs) "
                f"runs past port {LAST_PORT}; start it at {LAST_PORT + 1 - size} or below",
                f"{start + size - 1 - LAST_PORT} ports",
            )
        ]
    ports = host_ports(env)
    if ports is None:
        return []
    low, high = max(min(ports.all()), EPHEMERAL_PORTS[0]), min(max(ports.all()), EPHEMERAL_PORTS[1])
    if low > high:
        return []
    return [
        Violation(
            "host-ports-ephemeral",
            f"{K8S}.network.hostPortStart",
            f"the job's host ports {low}-{high} are in the kernel's ephemeral range "
            f"{EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}; a client socket can take one before Ray binds it",
            f"{high - low + 1} ports",
        )
    ]


def _capacity_block_walltime(env: Environment) -> list[Violation]:
    """On a Capacity Block the job's walltime (`rayJob.activeDeadlineSeconds`) fits the block's usable window:
    from its start to the scale-in before its end. EC2 terminates the block's instances at its end
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html); a longer job is cut off
    and, with no bound at all, never told it must stop."""
    from ..nodepools.capacity_blocks import block_of

    assert env.kubernetes is not None
    block = block_of(env.gang.pool)
    if block is None:
        return []
    window = int((block.scale_in_at - block.start).total_seconds())
    walltime = env.kubernetes.ray_job.active_deadline_seconds
    if walltime is not None and walltime <= window:
        return []
    asked = "no walltime (activeDeadlineSeconds: null)" if walltime is None else f"a walltime of {walltime} s"
    return [
        Violation(
            "capacity-block-walltime",
            f"{K8S}.rayJob.activeDeadlineSeconds",
            f"the job has {asked}, but Capacity Block {env.gang.pool.eks.capacity_reservation_id} gives "  # type: ignore[union-attr]
            f"{window} s from its start to the scale-in {block.scale_in_minutes} min before its end: set "
            f"activeDeadlineSeconds to at most {window}",
            "" if walltime is None else f"{walltime - window} s",
        )
    ]


def _link_local_interfaces(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME never name a link-local interface (`lo`, `docker*`, `veth*`,
    EKS's `pod-id-link0`): no other node reaches it, so NCCL's bootstrap hangs instead of failing
    (aws-samples/aws-do-eks #54, #63; `grpo_infra.k8s.network.LINK_LOCAL_PREFIXES`). An exclusion list (`^...`)
    is what keeps them out."""
    out = []
    for role, pod in job_pods(job).items():
        for container in pod.get("containers", []):
            for var in container.get("env", []):
                value = var.get("value")
                if var["name"] not in SOCKET_VARIABLES or value is None or value.startswith("^"):
                    continue
                named = [n for n in value.lstrip("=").split(",") if n and link_local(n)]
                if named:
                    index = next((i for i, p in enumerate(env.pools) if set(named) & set(p.fabric.interfaces)), None)
                    where = f"{ENV}.pools[{index}].fabric.interfaces" if index is not None else f"{ENV}.job.env"
                    if env.kubernetes is not None and env.kubernetes.network.interface in named:
                        where = f"{K8S}.network.interface"
                    out.append(
                        Violation(
                            "socket-interface-link-local",
                            where,
                            f"the {role} pod sets {var['name']}={value}: {', '.join(named)} is link-local, no other "
                            "node reaches it and NCCL's bootstrap hangs; name the node's routable interface",
                        )
                    )
    return out


def _device_host_paths(env: Environment, job: dict[str, Any]) -> list[Violation]:
    """No Ray pod mounts a device directory from the host (`/dev/infiniband`, ...): the device plugin hands the
    pod its own devices, and on EKS a `/dev/infiniband` hostPath beside the EFA device plugin's devices breaks
    EFA, after which NCCL falls back to sockets (aws-samples/aws-do-eks #54, #63)."""
    out = []
    for role, pod in job_pods(job).items():
        for volume in pod.get("volumes", []):
            path = volume.get("hostPath", {}).get("path", "")
            if path == "/dev" or path.startswith("/dev/"):
                declared = [v.name for v in env.kubernetes.volumes] if env.kubernetes is not None else []
                index = f"[{declared.index(volume['name'])}]" if volume["name"] in declared else ""
                out.append(
                    Violation(
                        "device-hostpath",
                        f"{K8S}.volumes{index}",
                        f"the {role} pod mounts the host's {path} (volume {volume['name']}): devices come from the "
                        "pool's device plugin (`fabric.resource`); drop the hostPath",
                    )
                )
    return out


def _eks_driver(env: Environment) -> list[Violation]:
    """An EKS pool pinned to an AMI release whose NVIDIA driver is older than the image's CUDA needs
    (`grpo_infra.image.driver.EKS_AMI_MIN_RELEASE`): every worker would fail at its first CUDA call."""
    from ..image.driver import eks_release_problem, min_driver

    needed = min_driver(env.image.contents.cuda)
    out = []
    for i, pool in enumerate(env.pools):
        if needed is None or pool.eks is None or pool.eks.release_version is None:
            continue
        problem = eks_release_problem(needed, pool.eks.release_version)
        if problem:
            out.append(
                Violation(
                    "eks-ami-driver",
                    f"{ENV}.pools[{i}].eks.releaseVersion",
                    f"the image's CUDA {env.image.contents.cuda} needs NVIDIA driver >= {needed}: {problem}",
                )
            )
    return out


def _gke_driver(env: Environment) -> list[Violation]:
    """A GKE pool does not ask for GKE's DEFAULT driver when the image's CUDA needs a newer branch
    (`grpo_infra.image.driver.needs_latest_driver`): every worker would fail at its first CUDA call."""
    from ..image.driver import min_driver, needs_latest_driver

    if not needs_latest_driver(env):
        return []
    out = []
    for i, pool in enumerate(env.pools):
        if pool.gke is not None and pool.gke.gpu_driver_version == "DEFAULT":
            out.append(
                Violation(
                    "gke-driver-version",
                    f"{ENV}.pools[{i}].gke.gpuDriverVersion",
                    f"the image's CUDA {env.image.contents.cuda} needs NVIDIA driver >= "
                    f"{min_driver(env.image.contents.cuda)}, newer than GKE's DEFAULT: use LATEST (the default), or "
                    "INSTALLATION_DISABLED and install one yourself",
                )
            )
    return out


def kubernetes_warnings(env: Environment) -> list[Violation]:
    """What holds a job on some clusters and not on others; never refuses a stack."""
    return _one_head_node_on_bare_metal(env)


def _one_head_node_on_bare_metal(env: Environment) -> list[Violation]:
    """A RayJob's submitter keeps away from its head's node, so a head node lost for good fails the attempt
    through the submitter's probe (grpo_infra/k8s/node_loss.py). With one head node they share it, and the
    attempt ends only once the node object is deleted (a cloud's node controller does it when the instance is
    gone, k8s.io/cloud-provider v0.36.3 nodelifecycle) or tainted out-of-service by a person; an existing
    cluster has no cloud to do it."""
    k8s = env.kubernetes
    if k8s is None or k8s.provider != "existing" or k8s.head_pool is None or k8s.head_pool.nodes > 1:
        return []
    if env.job.kind not in ("rayjob", "raycronjob"):
        return []
    return [
        Violation(
            "head-pool-one-node",
            f"{K8S}.headPool.nodes",
            "one head node on an existing cluster: if it is lost for good, the RayJob stays Running until someone "
            'deletes the node or taints it node.kubernetes.io/out-of-service (docs/kubernetes.md, "When the head '
            'is lost"); give the head pool 2 nodes',
        )
    ]
