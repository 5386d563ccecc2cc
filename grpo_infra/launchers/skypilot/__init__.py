"""The `skypilot` launcher: a SkyPilot task YAML for a cloud or for SkyPilot on Kubernetes.

Field names and meanings from SkyPilot 0.14.1 (sky/utils/schemas.py, the task and resources schemas;
sky/task.py Task.from_yaml_config): `num_nodes`, `resources.{infra, accelerators, image_id, use_spot,
disk_size, ports}`, `envs`, `secrets` (a null value is filled from `sky launch --secret NAME`, from the
launching shell, and is not stored in the task), `file_mounts` (local sources resolved from the directory
`sky launch` runs in, which must exist), `setup`, `run`; and the variables SkyPilot sets for `run` on every
node: SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (one per line, head first), SKYPILOT_NUM_GPUS_PER_NODE.

On a Kubernetes cluster whose gang admission is Kueue's (the stack's own target), the task's `config`
(SkyPilot's per-task override of ~/.sky/config.yaml: `kubernetes.pod_config`, merged into every pod
SkyPilot creates; docs.skypilot.co/en/v0.14.1/reference/config.html#kubernetes-pod-config) labels the pods
with the tenant's LocalQueue (`kueue.x-k8s.io/queue-name`), so Kueue counts them against the tenant's quota
like the RayJob's (kueue.sigs.k8s.io/docs/tasks/run/plain_pods: needs Kueue's `pod` integration).
"""

from __future__ import annotations

from typing import Any

from ...image import image_reference
from ...k8s.operators import uses_kueue
from ...k8s.rayjob import QUEUE_LABEL
from ...ports import ray_ports
from ...spec import Environment
from ..common import cloud_node_script, dump_yaml, gate_package_files, job_environment

FOLDER = "skypilot"
TASK = f"{FOLDER}/task.yaml"
# Where file_mounts puts the fabric gate's package on every node.
GATE_DIR = "~/.grpo-infra"
# The run's Ray token: one value for every node, given at launch as a secret.
TOKEN_SECRET = "RAY_AUTH_TOKEN"
SETUP = """\
set -euo pipefail
# Nothing is installed here: the image carries verl, Ray and torch. Fail early if it does not.
python3 -c 'import ray, torch, verl' || { echo "grpo: the image lacks ray, torch or verl" >&2; exit 1; }
"""


def task(env: Environment) -> dict[str, Any]:
    """The task as SkyPilot reads it."""
    assert env.launchers is not None and env.launchers.skypilot is not None
    sky, gang = env.launchers.skypilot, env.gang
    resources: dict[str, Any] = {
        "infra": sky.infra,
        "accelerators": f"{sky.accelerator}:{gang.gpus_per_node}",
    }
    reference = image_reference(env)
    if reference is not None:  # None: the stack's image is the hosts' own environment
        resources["image_id"] = f"docker:{reference}"
    if sky.use_spot:
        resources["use_spot"] = True
    if sky.disk_size_gb is not None:
        resources["disk_size"] = sky.disk_size_gb
    if sky.expose_dashboard:
        resources["ports"] = [
            ray_ports(sky.ray_ports.start, sky.ray_ports.end, 0, env.gang.pool.ray_block_size).dashboard
        ]
    document: dict[str, Any] = {
        "name": env.job.name,
        "num_nodes": gang.nodes,
        "resources": resources,
        "envs": dict(job_environment(env, sky.interface)),
        "secrets": {name: None for name in [*(s.env for s in env.job.secrets), TOKEN_SECRET]},
    }
    # The job's storage (docs/launchers.md, "Storage"): buckets in file_mounts, volumes by name.
    mounts: dict[str, Any] = {s.path: {"source": s.source, "mode": s.mode} for s in sky.storage if s.source}
    if env.job.preflight.nccl.enabled:
        mounts[GATE_DIR] = "gate"
    if mounts:
        document["file_mounts"] = mounts
    volumes = {s.path: s.volume for s in sky.storage if s.volume}
    if volumes:
        document["volumes"] = volumes
    queue = kueue_pod_config(env)
    if queue is not None:
        document["config"] = queue
    document["setup"] = SETUP
    document["run"] = cloud_node_script(
        env,
        ports=sky.ray_ports,
        interface=sky.interface,
        tool="SkyPilot",
        ips_var="$SKYPILOT_NODE_IPS",
        rank_var="${SKYPILOT_NODE_RANK:-}",
        head_var='"${node_ips[0]}"',
        gpus_var="${SKYPILOT_NUM_GPUS_PER_NODE:-0}",
        gate_dir="$HOME/.grpo-infra",
        # An exposed dashboard listens on the node's address (SkyPilot opens the port); else loopback only.
        dashboard_loopback=not sky.expose_dashboard,
    )
    return document


def kueue_pod_config(env: Environment) -> dict[str, Any] | None:
    """SkyPilot's pod config labelling the run's pods with the tenant's Kueue queue, when SkyPilot runs on
    the stack's own Kueue-managed cluster; None elsewhere (a cloud, or Volcano)."""
    assert env.launchers is not None and env.launchers.skypilot is not None
    if env.target != "kubernetes" or not env.launchers.skypilot.infra.startswith("k8s") or not uses_kueue(env):
        return None
    queue = env.tenant(env.job.tenant).queue
    return {"kubernetes": {"pod_config": {"metadata": {"labels": {QUEUE_LABEL: queue}}}}}


def render_files(env: Environment) -> dict[str, str]:
    """`skypilot/task.yaml` and the gate's package it mounts (nothing when the stack declares no SkyPilot)."""
    if env.launchers is None or env.launchers.skypilot is None:
        return {}
    secrets = " ".join(f"--secret {name}" for name in [*(s.env for s in env.job.secrets), TOKEN_SECRET])
    header = (
        f"# GRPO job {env.job.name} as a SkyPilot task. Rendered by grpo-infra; edit the stack, not this file.\n"
        f"# Launch from this directory (file_mounts are relative to it), with the secrets exported:\n"
        f"#   export RAY_AUTH_TOKEN=$(od -An -v -tx1 -N32 /dev/urandom | tr -d ' \\n')\n"
        f"#   sky launch -c {env.job.name} {secrets} task.yaml\n"
    )
    files = {TASK: dump_yaml(header, task(env))}
    if env.job.preflight.nccl.enabled:
        files.update(gate_package_files(FOLDER))
    return dict(sorted(files.items()))
