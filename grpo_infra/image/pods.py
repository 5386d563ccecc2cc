"""The runtime image guard as a Kubernetes init container of the head and of every worker pod.

An init container runs to completion before the pod's containers start (and a failing one keeps
them from starting), so KubeRay's `ray start` never runs in an image that differs from the stack's
declaration: the pod's log and `kubectl describe` show the guard's one FAIL line. A prebuilt image need
not contain this project, so the program travels with the job: one ConfigMap in the job's namespace
(`grpo_infra.k8s.shipped.guard_config_map`), mounted read-only on the init container and run as
`python3 GUARD_MOUNT/image_guard.py ARGS`. The pod template carries the arguments and the ConfigMap's
name, which ends in `guard_digest()`, never the program itself.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..spec import Environment
from ..spec.pools import Pool
from . import guard_program, image_reference
from .dockerfile import GUARD_FILE
from .variant import runtime_guard_args

CONTAINER_NAME = "image-guard"
# The pod volume holding the program, and where the init container sees it. Not the images' own
# /opt/grpo-infra (a built image's copy of the guard, and the fabric gate's mount on the head).
VOLUME = "image-guard"
GUARD_MOUNT = "/opt/grpo-infra-guard"
# Reads package metadata and a few files: a fraction of a core, well under a GiB.
CPU = "500m"
MEMORY = "512Mi"
DIGEST_CHARS = 10


def guard_digest() -> str:
    """The first hex digits of the program's SHA-256: what names its ConfigMap (`grpo_infra.k8s.shipped`)."""
    return hashlib.sha256(guard_program().encode()).hexdigest()[:DIGEST_CHARS]


def guard_command(env: Environment, gpu_node: bool) -> list[str]:
    """`python3 <mounted program> ARGS`: the stack's declared contents (the CPU variant's, with
    `image.variant: cpu`), and for a GPU pod the node's facts."""
    return ["python3", f"{GUARD_MOUNT}/{GUARD_FILE}", *runtime_guard_args(env, gpu_node)]


def verbs_devices(pool: Pool, count: int) -> dict[str, str]:
    """The fabric resource the guard must hold on a pool whose HCAs it checks (`--hca`), `count` as the
    worker's container holds: libibverbs lists an HCA only when its /dev/infiniband/uverbsN exists in the
    container (rdma-core v44.0 libibverbs/init.c `try_access_device`), and the RDMA device plugin gives
    those only to a container that requests the pool's resource (k8s-rdma-shared-dev-plugin: Allocate
    answers per container). Without it the guard lists no HCA on a real node and the workers never start.
    An init container's request counts as the maximum, not the sum, with the pod's containers
    (Kubernetes "Resource sharing within containers"), so the pod asks no more than before."""
    fabric = pool.fabric
    if not fabric.verbs or not fabric.resource or count < 1:
        return {}
    return {fabric.resource: str(count)}


def image_guard_container(env: Environment, gpu_node: bool, devices: dict[str, str] | None = None) -> dict[str, Any]:
    """The init container: the job's image, the guard's program from the pod volume `VOLUME` (read-only)
    and the stack's declared contents. `gpu_node`: the pod holds GPUs (a worker), so the node's driver and
    HCAs are checked too; the head's pod (no GPU, a CPU node) checks the image alone. `devices`: the
    extended resources the checks need (`verbs_devices`)."""
    size = {"cpu": CPU, "memory": MEMORY, **(devices or {})}
    return {
        "name": CONTAINER_NAME,
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "command": guard_command(env, gpu_node),
        "resources": {"requests": dict(size), "limits": dict(size)},
        "volumeMounts": [{"name": VOLUME, "mountPath": GUARD_MOUNT, "readOnly": True}],
    }
