"""The `ray` launcher: Ray started by hand on machines you can reach, then the job through the Jobs API.

Renders `ray/head.sh`, `ray/worker.sh`, `ray/submit.sh`, the job's runtime environment and the fabric
gate's code (shipped with the job through `py_modules`, as the RayJob ships it in a ConfigMap). Follows
verl's "Launch Manually" path (ray start --head, ray start --address, ray job submit) with this
project's rules: the interface's address instead of 0.0.0.0, a per-run port block, token auth, a
readiness wait, and a stop that touches only this run's processes.
"""

from __future__ import annotations

import shlex

import yaml

from ... import verl
from ...ports import block_count
from ...preflight.gate import gate_command
from ...slurmgen.sbatch import DEFAULT_READY_TIMEOUT_S
from ...spec import Environment
from ..common import GATE_PACKAGE_DIR, RUN_ROOT, gate_package_files, job_environment, node_functions, render_template

FOLDER = "ray"


def _context(env: Environment) -> dict[str, object]:
    assert env.launchers is not None and env.launchers.ray is not None
    ray = env.launchers.ray
    gang = env.gang
    return {
        "job_name": env.job.name,
        "nodes": gang.nodes,
        "world_size": gang.world_size,
        "gpus_per_node": gang.gpus_per_node,
        "port_start": ray.ray_ports.start,
        "port_end": ray.ray_ports.end,
        "port_blocks": block_count(ray.ray_ports.start, ray.ray_ports.end, gang.pool.ray_block_size),
        "ready_timeout": DEFAULT_READY_TIMEOUT_S,
        "secrets": [s.env for s in env.job.secrets],
        "interface": ray.interface,
        "interface_quoted": shlex.quote(ray.interface),
        "run_root": RUN_ROOT,
        "working_dir": ray.working_dir,
        "node_functions": node_functions(env, ray.ray_ports, ray.interface),
    }


def runtime_env(env: Environment) -> str:
    """`runtime_env.yaml`: the gate's package (when the gate is on) and the job's plain variables."""
    assert env.launchers is not None and env.launchers.ray is not None
    document: dict[str, object] = {}
    if env.job.preflight.nccl.enabled:
        document["py_modules"] = [GATE_PACKAGE_DIR]
    document["env_vars"] = dict(job_environment(env, env.launchers.ray.interface))
    header = (
        f"# Runtime environment of GRPO job {env.job.name}, for `ray job submit --runtime-env` (submit.sh).\n"
        "# Rendered by grpo-infra; plain variables only: secrets never travel through the Jobs API.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


def render_files(env: Environment) -> dict[str, str]:
    """`ray/<file>` for the stack's manual Ray launcher (nothing when the stack declares none)."""
    if env.launchers is None or env.launchers.ray is None:
        return {}
    context = _context(env)
    gate = gate_command(env)
    files = {
        f"{FOLDER}/head.sh": render_template("head.sh.j2", **context),
        f"{FOLDER}/worker.sh": render_template("worker.sh.j2", **context),
        f"{FOLDER}/submit.sh": render_template(
            "submit.sh.j2",
            **context,
            verl_command=shlex.quote(verl.shell_command(env)),
            gate_command=shlex.quote(gate) if gate else None,
            gate_word="the fabric gate, then " if gate else "",
        ),
        f"{FOLDER}/runtime_env.yaml": runtime_env(env),
    }
    if gate:
        files.update(gate_package_files(FOLDER))
    return dict(sorted(files.items()))
