"""What every launcher shares: the node functions and the job's entrypoint (fabric gate, then verl),
each from the rule the Slurm and Kubernetes targets already use.

- the Ray node lifecycle (ports, address and NCCL/Gloo interfaces, `ray start` options, readiness
  barrier, stop): `grpo_infra.lifecycle.ray_node.library`, the same text the sbatch embeds;
- environment: `fabric.nccl_env` for the pool, the spec's `job.env`, `debug.debug_env`;
- entrypoint: `preflight.gate.gate_command` (the gate the RayJob runs) and `verl.shell_command`.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from .. import debug, training, verl
from ..fabric import nccl_env
from ..lifecycle.ray_node import library, shell_templates
from ..preflight.gate import gate_command
from ..slurmgen.sbatch import DEFAULT_READY_TIMEOUT_S, single_quoted
from ..spec import Environment
from ..spec.slurm import PortRange
from ..watchdog import watchdog_env

# Where a run's per-node Ray temp dirs live: `$GRPO_RAY_TMPDIR/grpo-ray-<run>/<node>`.
RUN_ROOT = "${GRPO_RAY_TMPDIR:-/tmp}/grpo-ray-${GRPO_RUN_ID}"
# The node's Ray log directory; NCCL's per-rank debug files go there, next to Ray's own logs.
NODE_LOG_DIR = "$node_temp_dir/session_latest/logs"
# Gate code shipped with the job (as the RayJob ships it in a ConfigMap): the package directory.
GATE_PACKAGE_DIR = "gate/grpo_infra"


def render_template(name: str, **context: Any) -> str:
    """Render `grpo_infra/launchers/templates/<name>` (package data) with already computed values."""
    return shell_templates("grpo_infra.launchers").get_template(name).render(**context)


def job_environment(env: Environment, interface: str | None) -> list[tuple[str, str]]:
    """Plain variables of every process: the pool's fabric (sockets on `interface` when the fabric
    names none), torch's watchdog (grpo_infra/watchdog.py), then the spec's `job.env`. Never a secret."""
    return [*nccl_env(env.gang.pool, interface), *watchdog_env(env), *sorted(env.job.env.items())]


def node_functions(env: Environment, ports: PortRange, interface: str | None) -> str:
    """The shell functions every launcher's node script starts with: the lifecycle's, then the launchers'.

    The dashboard is on by default here: `ray job submit` goes through it."""
    return render_template(
        "launcher_node.sh.j2",
        lifecycle=library(
            ports, env.gang.pool.ray_block_size, dashboard_default=1, debug_start_args=debug.ray_start_args(env)
        ),
        exports=[(name, single_quoted(value)) for name, value in job_environment(env, interface)],
        # Double quotes: the log directory is the node's own, expanded on the node.
        debug_exports=[(name, f'"{value}"') for name, value in debug.debug_env(env, NODE_LOG_DIR)],
        debug_check=debug.DEBUGPY_CHECK if debug.needs_debugpy(env) else None,
        debug_warning=debug.warning(env),
        secrets=[s.env for s in env.job.secrets],
        ready_timeout=DEFAULT_READY_TIMEOUT_S,
        nodes=env.gang.nodes,
        world_size=env.gang.world_size,
    ).rstrip("\n")


def resumed(env: Environment, command: str) -> str:
    """`command` (one simple shell command) under the resume rule, with `checkpoint.resume: auto`: the lifecycle
    library's `$resume_program` refuses a checkpoint directory of another experiment before it starts, and
    fails a resumed run that exits 0 without a newer step (grpo_infra/lifecycle/resume.py), as on Kubernetes."""
    if env.job.checkpoint.resume != "auto":
        return command
    return (
        f'python3 -c "$resume_program" --checkpoint-dir {shlex.quote(env.job.checkpoint.dir)} '
        f"--identity {shlex.quote(training.identity_json(env))} -- {command}"
    )


def gate_prefixed(env: Environment, gate_dir: str, driver: str | None = None) -> str:
    """The head's command, under the resume rule, with the shipped gate package on the gate's import path only."""
    gate = gate_command(env)
    main = resumed(env, driver if driver is not None else verl.shell_command(env))
    if gate is None:
        return main
    return f'PYTHONPATH="{gate_dir}${{PYTHONPATH:+:$PYTHONPATH}}" {gate} && {main}'


def cloud_node_script(
    env: Environment,
    *,
    ports: PortRange,
    interface: str | None,
    tool: str,
    ips_var: str,
    rank_var: str,
    head_var: str,
    gpus_var: str,
    gate_dir: str,
    dashboard_loopback: bool,
    count_var: str | None = None,
) -> str:
    """The script every node of a SkyPilot or dstack run executes: rank 0 is the head (readiness
    wait, fabric gate, verl), the others join it and live as long as it does."""
    return render_template(
        "cloud_node.sh.j2",
        node_functions=node_functions(env, ports, interface),
        job_name=env.job.name,
        tool=tool,
        ips_var=ips_var,
        rank_var=rank_var,
        head_var=head_var,
        gpus_var=gpus_var,
        nodes=env.gang.nodes,
        gpus_per_node=env.gang.gpus_per_node,
        run_root=RUN_ROOT,
        ready_timeout=DEFAULT_READY_TIMEOUT_S,
        gate=env.job.preflight.nccl.enabled,
        head_command=gate_prefixed(env, gate_dir),
        entrypoint_command=gate_prefixed(env, gate_dir, driver='bash -c "$GRPO_ENTRYPOINT"'),
        dashboard_loopback=dashboard_loopback,
        count_var=count_var,
    )


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (scripts) as YAML literal blocks, so the rendered file reads like the script."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str)


def dump_yaml(header: str, document: dict[str, Any]) -> str:
    """`header` comment lines, then the document with scripts as literal blocks, keys in the given order."""
    body = yaml.dump(document, Dumper=_LiteralDumper, sort_keys=False, width=120, allow_unicode=True)
    return header + body


def gate_package_files(folder: str) -> dict[str, str]:
    """The fabric gate's package under `<folder>/gate/`, as the RayJob's ConfigMap ships it
    (`k8s.gate.gate_files`); an empty `__init__.py` gets a comment line, so every file has content."""
    from ..k8s.gate import gate_files

    return {
        f"{folder}/gate/{path}": text or "# The fabric gate's package, shipped with the job by grpo-infra.\n"
        for path, text in gate_files().items()
    }
