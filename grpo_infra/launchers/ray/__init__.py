"""The `ray` launcher: Ray started by hand on machines you can reach, then the job through the Jobs API.

Renders `ray/head.sh`, `ray/worker.sh`, `ray/submit.sh`, the job's runtime environment, the fabric
gate's code and the resume rule's program (shipped with the job through `py_modules`, as the RayJob ships
them in ConfigMaps). Follows
verl's "Launch Manually" path (ray start --head, ray start --address, ray job submit) with this
project's rules: the interface's address instead of 0.0.0.0, a per-run port block, token auth, a
readiness wait, and a stop that touches only this run's processes.
"""

from __future__ import annotations

import shlex

import yaml

from ... import training, verl
from ...lifecycle.ray_node import RESUME_PROGRAM
from ...ports import block_count
from ...preflight.gate import gate_command
from ...slurmgen.sbatch import DEFAULT_READY_TIMEOUT_S
from ...spec import Environment
from ..common import GATE_PACKAGE_DIR, RUN_ROOT, gate_package_files, job_environment, node_functions, render_template

FOLDER = "ray"
# The resume rule's program as a module of its own (`python3 -m grpo_infra_resume`): a name no image holds,
# so shipping it shadows nothing (grpo_infra/lifecycle/resume.py).
RESUME_PACKAGE = "grpo_infra_resume"
RESUME_PACKAGE_DIR = f"resume/{RESUME_PACKAGE}"


def resume_files() -> dict[str, str]:
    """`ray/resume/grpo_infra_resume/`: the resume rule's program as the package's `__main__`."""
    return {
        f"{FOLDER}/{RESUME_PACKAGE_DIR}/__init__.py": "# The resume rule, shipped with the job by grpo-infra.\n",
        f"{FOLDER}/{RESUME_PACKAGE_DIR}/__main__.py": RESUME_PROGRAM.read_text(encoding="utf-8"),
    }


def resume_enabled(env: Environment) -> bool:
    return env.job.checkpoint.resume == "auto"


def driver_command(env: Environment) -> str:
    """verl's command, under the resume rule with `checkpoint.resume: auto` (refuse another experiment's
    checkpoint directory, fail a resumed run that did not advance), as one shell line."""
    command = verl.shell_command(env)
    if not resume_enabled(env):
        return command
    rule = ["python3", "-m", RESUME_PACKAGE, "--checkpoint-dir", env.job.checkpoint.dir]
    return shlex.join([*rule, "--identity", training.identity_json(env), "--"]) + " " + command


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
    modules = [GATE_PACKAGE_DIR] if env.job.preflight.nccl.enabled else []
    modules += [RESUME_PACKAGE_DIR] if resume_enabled(env) else []
    if modules:
        document["py_modules"] = modules
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
            verl_command=shlex.quote(driver_command(env)),
            gate_command=shlex.quote(gate) if gate else None,
            gate_word="the fabric gate, then " if gate else "",
        ),
        f"{FOLDER}/runtime_env.yaml": runtime_env(env),
    }
    if gate:
        files.update(gate_package_files(FOLDER))
    if resume_enabled(env):
        files.update(resume_files())
    return dict(sorted(files.items()))
