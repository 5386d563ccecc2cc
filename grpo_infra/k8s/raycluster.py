"""The one Ray cluster builder: head and worker groups, placement, sizing, volumes, auth, network, probes.

Every kind the stack can run (`job.kind`: a RayJob, a RayCluster, a RayCronJob's RayJob template) carries
this same `rayClusterSpec`; what differs between them lives in `rayjob.py`, `raycronjob.py` and
`ray_cluster()` below, never in a second copy of a pod. The worker group's size and each pod's GPUs are
the gang's, which is also where verl's `trainer.nnodes` and `trainer.n_gpus_per_node` come from, so the
two cannot disagree.
"""

from __future__ import annotations

import json
from typing import Any

from .. import debug
from ..image import image_reference, ray_version
from ..image.pods import image_guard_container, verbs_devices
from ..nodepools.capacity_blocks import checkpoint_deadline_env
from ..spec import Environment
from ..spec.job import NfsExport
from ..spec.layout import pool_resource
from ..spec.pools import Pool
from .access import secret_references
from .disruption import disruption_annotations
from .gate import gate_enabled, gate_mount, gate_sidecar, gate_volume
from .labels import JOB_LABEL, MANAGED_BY, head_pod_labels, ray_token_secret_name
from .network import (
    host_networking,
    ray_ports_container,
    worker_annotations,
    worker_nccl_env,
    worker_pod_network,
    worker_ray_start_params,
)
from .node_loss import AGENT_PORT, DASHBOARD_PORT, probes, ray_health_env
from .operators import uses_kueue
from .placement import cpu_quantity, memory_quantity, node_selector, node_share, tolerations
from .queues import head_cpu_milli, head_memory_mi
from .shipped import guard_volume, resume_enabled, resume_mount, resume_volume

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Kueue deactivates a workload admitted longer than this many seconds (Kueue v0.19.2
# pkg/controller/constants/constants.go `MaxExecTimeSecondsLabel`; the job's label is copied to the
# Workload's `spec.maximumExecutionTimeSeconds`, pkg/controller/jobframework/utils.go).
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
# Ray's log directory in every Ray pod: NCCL's per-rank debug files (job.debug.ncclDebug) land next to Ray's.
RAY_LOG_DIR = "/tmp/ray/session_latest/logs"
# Fabrics whose drivers pin memory for RDMA need it unlimited in the container.
_RDMA = ("infiniband", "roce", "efa")
DEFAULT_CHECKPOINT_CLAIM = "grpo-checkpoints"


def worker_group_name(env: Environment) -> str:
    """The GPU worker group is named after its pool (never `head` or `submitter`); a disaggregated job's
    first group, the trainer's, after its role."""
    roles = env.role_gangs()
    return roles[0].group_name if roles else env.gang.pool.name


def worker_groups(env: Environment) -> list[dict[str, Any]]:
    """One worker group per pool the job holds nodes of: the gang's, or each role's of a disaggregated job.

    Kueue turns every worker group into a pod set of the one Workload and admits all of them together or
    none (Kueue v0.19.2 pkg/controller/jobs/raycluster/common.go BuildPodSets), each on the flavor its
    nodeSelector and tolerations match (grpo_infra/validate/rules.py); so the trainer never holds its
    nodes while the rollout waits for its own.
    """
    roles = env.role_gangs()
    if not roles:
        return [_worker_group(env, env.gang.pool, env.gang.nodes, worker_group_name(env), {})]
    return [
        _worker_group(env, r.pool, r.nodes, r.group_name, {pool_resource(r.pool.name): r.gpus_per_node}) for r in roles
    ]


def scheduling_labels(env: Environment) -> dict[str, str]:
    """What admits the gang: the tenant's LocalQueue and priority under Kueue, the Volcano queue otherwise."""
    assert env.kubernetes is not None
    tenant = env.tenant(env.job.tenant)
    if uses_kueue(env):
        return {QUEUE_LABEL: tenant.queue, PRIORITY_LABEL: env.kubernetes.ray_job.priority_class}
    return {"ray.io/scheduler-name": "volcano", "volcano.sh/queue-name": tenant.queue}


def ray_cluster_spec(env: Environment, gate_in_head: bool = False) -> dict[str, Any]:
    """The `rayClusterSpec` every kind carries.

    `gate_in_head`: the fabric gate runs once from a container beside the head (a RayCluster, where no
    entrypoint exists) instead of in the job's entrypoint (`grpo_infra.k8s.gate.gate_sidecar`).
    """
    return {
        # The image's declared Ray: KubeRay v1.7.0 picks probes by it (HTTP /api/healthz from 2.53.0,
        # controllers/ray/common/pod.go:721-730) and accepts token auth from 2.52.0 (utils/validation.go:284-298).
        "rayVersion": ray_version(env),
        **ray_auth_options(env),
        "enableInTreeAutoscaling": False,
        "headGroupSpec": _head_group(env, gate_in_head),
        "workerGroupSpecs": worker_groups(env),
    }


def ray_cluster(env: Environment) -> dict[str, Any]:
    """`job.kind: raycluster`: a long-lived Ray cluster admitted whole by Kueue, for `grpo-infra submit`.

    Kueue's RayCluster integration admits head and worker groups as one workload (Kueue v0.19.2
    pkg/controller/jobs/raycluster) by unsuspending it; the lifetime label bounds how long it holds the
    quota. The fabric gate runs once, when the Ray cluster is up, beside the head: until it passes the
    head pod is not Ready, so the RayCluster is not `ready` and `submit` refuses it.
    """
    assert env.kubernetes is not None
    job = env.job
    labels = {**MANAGED_BY, JOB_LABEL: job.name, **scheduling_labels(env)}
    seconds = env.kubernetes.ray_cluster.max_execution_seconds()
    if seconds is not None and uses_kueue(env):
        labels[MAX_EXEC_TIME_LABEL] = str(seconds)
    spec = ray_cluster_spec(env, gate_in_head=True)
    if uses_kueue(env):
        # Kueue unsuspends the cluster when the whole gang fits (KubeRay >= 1.1 `spec.suspend`).
        spec = {**spec, "suspend": True}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": job.name, "namespace": job.tenant, "labels": labels},
        "spec": spec,
    }


def _head_group(env: Environment, gate_in_head: bool) -> dict[str, Any]:
    cpu, memory = cpu_quantity(head_cpu_milli(env)), memory_quantity(head_memory_mi(env))
    container = {
        "name": "ray-head",
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "env": _env(env, gpu=False),
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
        "volumeMounts": _mounts(env),
        # A wedged raylet or GCS is restarted after `nodeLoss.livenessSeconds` (grpo_infra.k8s.node_loss).
        **probes(env, head=True),
    }
    pod = _pod_spec(env, container, head_memory_mi(env), gpu_node=False)
    pod.update(head_placement(env))
    if gate_enabled(env):
        # The gate runs on the head (its driver), from the entrypoint or the sidecar: only the head needs its code.
        container["volumeMounts"].append(gate_mount())
        pod["volumes"].append(gate_volume(env))
        if gate_in_head:
            pod["containers"].append(gate_sidecar(env))
    if resume_enabled(env):
        # The driver runs on the head under the resume rule (`grpo_infra.k8s.rayjob.resume_guard`).
        container["volumeMounts"].append(resume_mount())
        pod["volumes"].append(resume_volume(env))
    return {
        # Reached inside the cluster only; people use `kubectl port-forward` (see dashboard_command).
        "serviceType": "ClusterIP",
        # Inside the pod's own network namespace: the operator and submitter reach it on the pod address,
        # port-forward on loopback; the ClusterIP service and the NetworkPolicy bound who else can.
        "rayStartParams": {"dashboard-host": "0.0.0.0", **debug.ray_start_params(env)},
        "template": {"metadata": pod_metadata(env), "spec": pod},
    }


def ray_resources_param(resources: dict[str, int]) -> str:
    """`rayStartParams.resources`: the JSON map in single quotes, the form KubeRay v1.6.2 writes itself
    (ray-operator/controllers/ray/common/pod.go:1062, `fmt.Sprintf("'%s'", ...)`) and `ray start --resources` gets
    through the pod's shell.

    Not the escaped form of KubeRay's samples (`'"{\\"Custom1\\": 1}"'`, ray-job.resources.yaml): v1.6.2's
    `getResourcesMap` (pod.go:1085-1098) trims the quotes but cannot parse the escapes, and
    `addWellKnownAcceleratorResources` then returns before it sets `num-gpus` from the container's
    `nvidia.com/gpu` limit (pod.go:1006-1008 only logs "failed to add accelerator resources"): the worker's
    Ray would count its GPUs by itself, and on the local nodes count none.
    """
    return "'" + json.dumps(resources, sort_keys=True) + "'"


def _worker_group(
    env: Environment, pool: Pool, nodes: int, group_name: str, ray_resources: dict[str, int]
) -> dict[str, Any]:
    assert env.kubernetes is not None
    share = node_share(env, pool)
    resources = share.resources()
    start_params = worker_ray_start_params(env)
    if ray_resources:
        start_params["resources"] = ray_resources_param(ray_resources)
    agent_port = int(start_params.get("dashboard-agent-listen-port", AGENT_PORT))
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "env": _env(env, gpu=True, pool=pool),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": _mounts(env),
        **probes(env, head=False, agent_port=agent_port),
    }
    if pool.fabric.kind in _RDMA:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    spec = _pod_spec(env, container, share.memory_mi, gpu_node=True, guard_devices=verbs_devices(pool, share.fabric))
    spec.update(worker_pod_network(env))
    spec["nodeSelector"] = node_selector(pool)
    if pool.taints:
        spec["tolerations"] = tolerations(pool)
    metadata = pod_metadata(env)
    annotations = {**metadata.pop("annotations", {}), **worker_annotations(env)}
    topology = env.kubernetes.topology
    if topology is not None and uses_kueue(env):
        levels = [lv for lv in topology.levels if lv != "kubernetes.io/hostname"] or topology.levels
        annotations[PREFERRED_TOPOLOGY] = levels[-1]
    if annotations:
        metadata["annotations"] = annotations
    return {
        "groupName": group_name,
        "replicas": nodes,
        "minReplicas": nodes,
        "maxReplicas": nodes,
        "numOfHosts": 1,
        "rayStartParams": {**start_params, **debug.ray_start_params(env)},
        "template": {"metadata": metadata, "spec": spec},
    }


def pod_metadata(env: Environment) -> dict[str, Any]:
    """Labels of every pod of the job (what the NetworkPolicy and the PodDisruptionBudget select) and the
    annotations that keep node autoscalers away from it (`grpo_infra.k8s.disruption`)."""
    metadata: dict[str, Any] = {"labels": {**MANAGED_BY, JOB_LABEL: env.job.name}}
    annotations = disruption_annotations(env)
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def _pod_spec(
    env: Environment,
    container: dict[str, Any],
    memory_mi: int,
    gpu_node: bool,
    guard_devices: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        # Ray pods need no Kubernetes API access.
        "automountServiceAccountToken": False,
        # The guard's program comes from the job's ConfigMap, named by its hash (`guard_config_map_name`);
        # then the node's ephemeral port range against the pod's Ray ports (the workers are the pods on the
        # host network, when the stack asks for it).
        "initContainers": [
            image_guard_container(env, gpu_node, guard_devices),
            ray_ports_container(env, host_network=gpu_node and host_networking(env)),
        ],
        "containers": [container],
        "volumes": [*_volumes(env, memory_mi), guard_volume(env)],
    }


def _env(env: Environment, gpu: bool, pool: Pool | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.job.env.items())]
    if gpu:
        out += [{"name": k, "value": v} for k, v in worker_nccl_env(env, pool)]
    out += [{"name": k, "value": v} for k, v in ray_health_env(env)]
    # On a Capacity Block, when verl must have saved its last checkpoint (the trainer reads it).
    out += [{"name": k, "value": v} for k, v in checkpoint_deadline_env(env)]
    out += [{"name": k, "value": v} for k, v in debug.debug_env(env, RAY_LOG_DIR)]
    out += [
        {"name": ref.env, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        for ref in secret_references(env)
    ]
    return out


def head_placement(env: Environment) -> dict[str, Any]:
    """The head's and submitter's node selector: the head pool's labels, when the stack has one."""
    assert env.kubernetes is not None
    head = env.kubernetes.head_pool
    return {"nodeSelector": dict(head.labels)} if head is not None else {}


def checkpoint_sub_path(env: Environment) -> str:
    """The job's own directory on the checkpoint volume: its name.

    The default claim is shared by the namespace; mounted at its root, a second experiment would find the
    first one's `latest_checkpointed_iteration.txt` and, with `resume_mode=auto`, verl 0.9.1 would load that
    foreign step (and skip training when it is past the new run's total, `ray_trainer.py` `fit`). Job names
    are unique per namespace (they name the RayJob/RayCluster), so two jobs never share this directory.
    """
    return env.job.name


def _mounts(env: Environment) -> list[dict[str, Any]]:
    """/dev/shm, the job's checkpoint directory, then the stack's shared volumes (models, data) at their paths."""
    assert env.kubernetes is not None
    checkpoints = {"name": "checkpoints", "mountPath": env.job.checkpoint.dir, "subPath": checkpoint_sub_path(env)}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, checkpoints]
    for volume in env.kubernetes.volumes:
        mount = {"name": volume.name, "mountPath": volume.mount_path}
        if volume.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return mounts


def _volumes(env: Environment, memory_mi: int) -> list[dict[str, Any]]:
    assert env.kubernetes is not None
    # NCCL and the rollout engine share tensors through /dev/shm; a quarter of the pod's memory.
    dshm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": memory_quantity(memory_mi // 4)}}
    shared = [
        {"name": v.name, **volume_source(v.claim_name, v.nfs, v.host_path, v.read_only)} for v in env.kubernetes.volumes
    ]
    return [dshm, {"name": "checkpoints", **checkpoint_source(env)}, *shared]


def volume_source(
    claim: str | None, nfs: NfsExport | None, host_path: str | None, read_only: bool = False
) -> dict[str, Any]:
    """A pod volume source from one of a claim, an NFS export or a host path."""
    if claim is not None:
        source: dict[str, Any] = {"claimName": claim}
        if read_only:
            source["readOnly"] = True
        return {"persistentVolumeClaim": source}
    if nfs is not None:
        return {"nfs": {"server": nfs.server, "path": nfs.path, **({"readOnly": True} if read_only else {})}}
    return {"hostPath": {"path": host_path, "type": "Directory"}}


def checkpoint_source(env: Environment) -> dict[str, Any]:
    """The volume source holding `checkpoint.dir` (the spec's, or the default PVC)."""
    volume = env.job.checkpoint.volume
    if volume is None:
        return volume_source(DEFAULT_CHECKPOINT_CLAIM, None, None)
    return volume_source(volume.claim_name, volume.nfs, volume.host_path)


def ray_auth_options(env: Environment) -> dict[str, Any]:
    """`authOptions` of the Ray cluster: token authentication unless the stack disabled it.

    With `mode: token`, KubeRay (>= 1.5.1) sets `RAY_AUTH_MODE`/`RAY_AUTH_TOKEN` on every Ray container
    and on the K8sJobMode submitter from the Secret `secretName` names (`ray_token_secret_name`, made
    by Pulumi), and its own dashboard client sends the token too. No token is ever rendered here.
    (`enableK8sTokenAuth` is rejected for RayJobs by KubeRay: not used.)
    """
    assert env.kubernetes is not None
    mode = env.kubernetes.ray_job.ray_auth
    if mode != "token":
        return {"authOptions": {"mode": mode}}
    return {"authOptions": {"mode": mode, "secretName": ray_token_secret_name(env)}}


def head_pod_selector(env: Environment) -> str:
    """`kubectl -l` selector of the job's Ray head pod."""
    return ",".join(f"{k}={v}" for k, v in head_pod_labels(env).items())


def _head_pod(env: Environment) -> str:
    return f"$(kubectl -n {env.job.tenant} get pod -l {head_pod_selector(env)} -o name)"


def dashboard_command(env: Environment) -> str:
    """How a person reaches the Ray dashboard: through the API server, to their own loopback."""
    return f"kubectl -n {env.job.tenant} port-forward {_head_pod(env)} {DASHBOARD_PORT}:{DASHBOARD_PORT}"


def dashboard_token_command(env: Environment) -> str | None:
    """How a person reads the job's Ray token (None when `rayAuth: disabled`): the one Secret the
    tenant's Role may read."""
    assert env.kubernetes is not None
    if env.kubernetes.ray_job.ray_auth != "token":
        return None
    return f"kubectl -n {env.job.tenant} get secret {ray_token_secret_name(env)} -o jsonpath='{{.data.auth_token}}' | base64 -d"
