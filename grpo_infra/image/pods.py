"""The runtime image guard as a Kubernetes init container of the head and of every worker pod.

An init container runs to completion before the pod's containers start (and a failing one keeps
them from starting), so KubeRay's `ray start` never runs in an image that differs from the stack's
declaration: the pod's log and `kubectl describe` show the guard's one FAIL line. The program is
passed inline (`python3 -c`): a prebuilt image need not contain this project.
"""

from __future__ import annotations

from typing import Any

from ..spec import Environment
from . import guard_program, image_reference
from .variant import runtime_guard_args

CONTAINER_NAME = "image-guard"
# Reads package metadata and a few files: a fraction of a core, well under a GiB.
CPU = "500m"
MEMORY = "512Mi"


def image_guard_container(env: Environment, gpu_node: bool) -> dict[str, Any]:
    """The init container: the job's image, the guard's program and the stack's declared contents
    (the CPU variant's, with `image.variant: cpu`). `gpu_node`: the pod holds GPUs (a worker), so the
    node's driver and HCAs are checked too; the head's pod (no GPU, a CPU node) checks the image alone."""
    return {
        "name": CONTAINER_NAME,
        "image": image_reference(env),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", guard_program(), *runtime_guard_args(env, gpu_node)],
        "resources": {"requests": {"cpu": CPU, "memory": MEMORY}, "limits": {"cpu": CPU, "memory": MEMORY}},
    }
