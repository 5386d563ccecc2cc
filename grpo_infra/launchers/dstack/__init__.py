"""The `dstack` launcher: a dstack task configuration, and the fleet it runs on when the stack names one.

Field names and meanings from dstack 0.22.5 (dstack/_internal/core/models/configurations.py
TaskConfiguration, fleets.py FleetConfiguration, resources.py GPUSpec `NAME:COUNT`):
`type: task`, `nodes`, `image`, `env` (`NAME=${{ secrets.NAME }}` takes the value of the project's secret
NAME, set once with `dstack secret set NAME VALUE`: the value never enters the file, the shell or the run's
configuration; dstack.ai/docs/concepts/secrets, dstack 0.19.17+), `commands`, `ports` (forwarded to localhost by an
attached `dstack apply`), `resources.{gpu, shm_size}`, `files` (local paths relative to the
configuration's directory), `fleets`, and `shell`: with a custom `image` dstack runs the commands with
/bin/sh unless `shell` is set (jobs/configurators/base.py `_shell`), and the node script is bash.
The dstack runner sets DSTACK_NODES_IPS (one per line), DSTACK_MASTER_NODE_IP, DSTACK_NODE_RANK,
DSTACK_NODES_NUM and DSTACK_GPUS_PER_NODE for every node of a multi-node task (runner executor).
"""

from __future__ import annotations

from typing import Any

from ...image import image_reference
from ...ports import ray_ports
from ...spec import Environment
from ..common import cloud_node_script, dump_yaml, gate_package_files, job_environment

FOLDER = "dstack"
TASK = f"{FOLDER}/task.dstack.yml"
FLEET = f"{FOLDER}/fleet.dstack.yml"
GATE_DIR = "/opt/grpo-infra"
TOKEN_SECRET = "RAY_AUTH_TOKEN"


def secret_names(env: Environment) -> list[str]:
    """The job's secrets and the run's Ray token, each a dstack secret of the same name."""
    return [*(s.env for s in env.job.secrets), TOKEN_SECRET]


def secret_reference(name: str) -> str:
    """`NAME=${{ secrets.NAME }}`: dstack fills the value from its secret store when the run starts."""
    return f"{name}=${{{{ secrets.{name} }}}}"


def _gpu(env: Environment) -> str:
    assert env.launchers is not None and env.launchers.dstack is not None
    return f"{env.launchers.dstack.gpu_name}:{env.gang.gpus_per_node}"


def task(env: Environment) -> dict[str, Any]:
    """The task configuration as dstack reads it."""
    assert env.launchers is not None and env.launchers.dstack is not None
    spec = env.launchers.dstack
    plain = [f"{name}={value}" for name, value in job_environment(env, spec.interface)]
    secrets = [secret_reference(name) for name in secret_names(env)]
    resources: dict[str, Any] = {"gpu": _gpu(env)}
    if spec.shm_size_gib is not None:
        resources["shm_size"] = f"{spec.shm_size_gib}GB"
    document: dict[str, Any] = {
        "type": "task",
        "name": env.job.name,
        "nodes": env.gang.nodes,
        "shell": "bash",
        "env": [*plain, *secrets],
    }
    reference = image_reference(env)
    if reference is not None:  # None: the stack's image is the hosts' own environment
        document["image"] = reference
    if env.job.preflight.nccl.enabled:
        document["files"] = [f"gate:{GATE_DIR}"]
    # The job's storage (docs/launchers.md, "Storage"): `NAME:PATH` network or `HOST_PATH:PATH` instance volumes.
    if spec.storage:
        document["volumes"] = [f"{s.volume or s.instance_path}:{s.path}" for s in spec.storage]
    document["commands"] = [
        cloud_node_script(
            env,
            ports=spec.ray_ports,
            interface=spec.interface,
            tool="dstack",
            ips_var="${DSTACK_NODES_IPS:-}",
            rank_var="${DSTACK_NODE_RANK:-}",
            head_var='"${DSTACK_MASTER_NODE_IP:-${node_ips[0]}}"',
            gpus_var="${DSTACK_GPUS_PER_NODE:-0}",
            gate_dir=GATE_DIR,
            dashboard_loopback=True,
            count_var="${DSTACK_NODES_NUM:-}",
        )
    ]
    # The dashboard, forwarded to the user's localhost by an attached `dstack apply`.
    document["ports"] = [ray_ports(spec.ray_ports.start, spec.ray_ports.end, 0, env.gang.pool.ray_block_size).dashboard]
    document["resources"] = resources
    if spec.fleet is not None:
        document["fleets"] = [spec.fleet.name]
    return document


def fleet(env: Environment) -> dict[str, Any] | None:
    """The fleet configuration: a cloud fleet of the gang's nodes with the pool's GPUs, or the SSH fleet's
    hosts, on one cluster network."""
    assert env.launchers is not None and env.launchers.dstack is not None
    spec = env.launchers.dstack.fleet
    if spec is None:
        return None
    document: dict[str, Any] = {"type": "fleet", "name": spec.name}
    if spec.ssh is not None:
        # An SSH fleet: its hosts are the ones listed; dstack reads their GPUs itself.
        ssh = spec.ssh
        document["ssh_config"] = {"user": ssh.user, "identity_file": ssh.identity_file, "hosts": list(ssh.hosts)}
        document["placement"] = spec.placement
        return document
    document |= {"nodes": env.gang.nodes, "placement": spec.placement}
    if spec.backends:
        document["backends"] = list(spec.backends)
    document["resources"] = {"gpu": _gpu(env)}
    return document


def render_files(env: Environment) -> dict[str, str]:
    """`dstack/task.dstack.yml`, the fleet when declared, and the gate's package the task ships."""
    if env.launchers is None or env.launchers.dstack is None:
        return {}
    header = (
        f"# GRPO job {env.job.name} as a dstack task. Rendered by grpo-infra; edit the stack, not this file.\n"
        f"# Once per project, `dstack secret set NAME VALUE` for {', '.join(secret_names(env))} (the values never\n"
        "# enter this file; RAY_AUTH_TOKEN: 64 random hex digits), then:  dstack apply -f task.dstack.yml\n"
    )
    files = {TASK: dump_yaml(header, task(env))}
    fleet_doc = fleet(env)
    if fleet_doc is not None:
        files[FLEET] = dump_yaml(
            f"# The fleet GRPO job {env.job.name} runs on. Rendered by grpo-infra.  dstack apply -f fleet.dstack.yml\n",
            fleet_doc,
        )
    if env.job.preflight.nccl.enabled:
        files.update(gate_package_files(FOLDER))
    return dict(sorted(files.items()))
