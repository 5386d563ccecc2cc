"""The GRPO RayJob: a CPU head, one GPU worker group filling the gang's nodes, verl as entrypoint.

Kueue admits it as one gang (head, workers and submitter together) by flipping `suspend`; the worker
group's size and each pod's GPUs are the gang's, which is also where verl's `trainer.nnodes` and
`trainer.n_gpus_per_node` come from, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any

from .. import debug
from ..image import image_reference, ray_version
from ..image.pods import image_guard_container
from ..spec import Environment
from ..spec.job import NfsExport
from .access import secret_references
from .disruption import disruption_annotations
from .gate import entrypoint, gate_enabled, gate_mount, gate_volume
from .labels import JOB_LABEL, MANAGED_BY, ray_token_secret_name
from .network import worker_annotations, worker_nccl_env, worker_pod_network, worker_ray_start_params
from .node_loss import AGENT_PORT, probes, ray_health_env
from .operators import uses_kueue
from .placement import cpu_quantity, memory_quantity, node_selector, node_share, tolerations
from .queues import SUBMITTER_CPU_MILLI, SUBMITTER_MEMORY_MI, head_cpu_milli, head_memory_mi

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
DASHBOARD_PORT = 8265
# Ray's log directory in every Ray pod: NCCL's per-rank debug files (job.debug.ncclDebug) land next to Ray's.
RAY_LOG_DIR = "/tmp/ray/session_latest/logs"
# Fabrics whose drivers pin memory for RDMA need it unlimited in the container.
_RDMA = ("infiniband", "roce", "efa")


def worker_group_name(env: Environment) -> str:
    """The GPU worker group is named after its pool (never `head` or `submitter`)."""
    return env.gang.pool.name


def ray_job(env: Environment) -> dict[str, Any]:
    """The RayJob object."""
    assert env.kubernetes is not None
    job, settings = env.job, env.kubernetes.ray_job
    tenant = env.tenant(job.tenant)
    labels = {**MANAGED_BY, JOB_LABEL: job.name}
    if uses_kueue(env):
        labels[QUEUE_LABEL] = tenant.queue
        labels[PRIORITY_LABEL] = settings.priority_class
    else:
        labels["ray.io/scheduler-name"] = "volcano"
        labels["volcano.sh/queue-name"] = tenant.queue
    spec: dict[str, Any] = {
        # The fabric gate, then verl (`grpo_infra.k8s.gate`); verl alone when the stack switched the gate off.
        "entrypoint": entrypoint(env),
        "submissionMode": "K8sJobMode",
        # Kueue unsuspends the job when the whole gang fits; Volcano gangs the pods itself.
        "suspend": uses_kueue(env),
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
    }
    if settings.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = settings.active_deadline_seconds
    spec["backoffLimit"] = settings.backoff_limit
    spec["submitterPodTemplate"] = _submitter_template(env)
    spec["rayClusterSpec"] = {
        # The image's declared Ray: KubeRay v1.7.0 picks probes by it (HTTP /api/healthz from 2.53.0,
        # controllers/ray/common/pod.go:721-730) and accepts token auth from 2.52.0 (utils/validation.go:284-298).
        "rayVersion": ray_version(env),
        **ray_auth_options(env),
        "enableInTreeAutoscaling": False,
        "headGroupSpec": _head_group(env),
        "workerGroupSpecs": [_worker_group(env)],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": job.name, "namespace": job.tenant, "labels": labels},
        "spec": spec,
    }


def _head_group(env: Environment) -> dict[str, Any]:
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
    pod = _pod_spec(env, container, head_memory_mi(env))
    pod.update(head_placement(env))
    if gate_enabled(env):
        # The gate runs in the entrypoint, on the head: only the head needs its code.
        container["volumeMounts"].append(gate_mount())
        pod["volumes"].append(gate_volume(env))
    return {
        # Reached inside the cluster only; people use `kubectl port-forward` (see dashboard_command).
        "serviceType": "ClusterIP",
        # Inside the pod's own network namespace: the operator and submitter reach it on the pod address,
        # port-forward on loopback; the ClusterIP service and the NetworkPolicy bound who else can.
        "rayStartParams": {"dashboard-host": "0.0.0.0", **debug.ray_start_params(env)},
        "template": {"metadata": _pod_metadata(env), "spec": pod},
    }


def _worker_group(env: Environment) -> dict[str, Any]:
    assert env.kubernetes is not None
    gang, pool = env.gang, env.gang.pool
    share = node_share(env, pool)
    resources = share.resources()
    start_params = worker_ray_start_params(env)
    agent_port = int(start_params.get("dashboard-agent-listen-port", AGENT_PORT))
    container: dict[str, Any] = {
        "name": "ray-worker",
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "env": _env(env, gpu=True),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": _mounts(env),
        **probes(env, head=False, agent_port=agent_port),
    }
    if pool.fabric.kind in _RDMA:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    spec = _pod_spec(env, container, share.memory_mi)
    spec.update(worker_pod_network(env))
    spec["nodeSelector"] = node_selector(pool)
    if pool.taints:
        spec["tolerations"] = tolerations(pool)
    metadata = _pod_metadata(env)
    annotations = {**metadata.pop("annotations", {}), **worker_annotations(env)}
    topology = env.kubernetes.topology
    if topology is not None and uses_kueue(env):
        levels = [lv for lv in topology.levels if lv != "kubernetes.io/hostname"] or topology.levels
        annotations[PREFERRED_TOPOLOGY] = levels[-1]
    if annotations:
        metadata["annotations"] = annotations
    return {
        "groupName": worker_group_name(env),
        "replicas": gang.nodes,
        "minReplicas": gang.nodes,
        "maxReplicas": gang.nodes,
        "numOfHosts": 1,
        "rayStartParams": {**start_params, **debug.ray_start_params(env)},
        "template": {"metadata": metadata, "spec": spec},
    }


def _submitter_template(env: Environment) -> dict[str, Any]:
    cpu, memory = cpu_quantity(SUBMITTER_CPU_MILLI), memory_quantity(SUBMITTER_MEMORY_MI)
    return {
        "metadata": _pod_metadata(env),
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            **head_placement(env),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": image_reference(env),
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def _pod_metadata(env: Environment) -> dict[str, Any]:
    """Labels of every pod of the job (what the NetworkPolicy and the PodDisruptionBudget select) and the
    annotations that keep node autoscalers away from it (`grpo_infra.k8s.disruption`)."""
    metadata: dict[str, Any] = {"labels": {**MANAGED_BY, JOB_LABEL: env.job.name}}
    annotations = disruption_annotations(env)
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def _pod_spec(env: Environment, container: dict[str, Any], memory_mi: int) -> dict[str, Any]:
    return {
        # Ray pods need no Kubernetes API access.
        "automountServiceAccountToken": False,
        "initContainers": [image_guard_container(env)],
        "containers": [container],
        "volumes": _volumes(env, memory_mi),
    }


def _env(env: Environment, gpu: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.job.env.items())]
    if gpu:
        out += [{"name": k, "value": v} for k, v in worker_nccl_env(env)]
    out += [{"name": k, "value": v} for k, v in ray_health_env(env)]
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


def _mounts(env: Environment) -> list[dict[str, Any]]:
    """/dev/shm, the checkpoint directory, then the stack's shared volumes (models, data) at their paths."""
    assert env.kubernetes is not None
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "checkpoints", "mountPath": env.job.checkpoint.dir}]
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


DEFAULT_CHECKPOINT_CLAIM = "grpo-checkpoints"


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


def _head_pod(env: Environment) -> str:
    return f"$(kubectl -n {env.job.tenant} get pod -l {JOB_LABEL}={env.job.name},ray.io/node-type=head -o name)"


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
