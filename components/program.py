"""What `pulumi up` runs: the stack's environment, validated, turned into components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.config import get_config, is_config_secret

from grpo_infra.check import violations
from grpo_infra.spec import ENVIRONMENT_KEY, PROJECT, Environment, SpecError, environment_from_config
from grpo_infra.spec.load import stack_source, with_lock

# The Pulumi project: Pulumi runs this program from the directory that holds Pulumi.yaml.
PROJECT_DIR = Path(__file__).resolve().parents[1]


def read_environment() -> Environment:
    """The environment exactly as the CLI reads it, from what `pulumi.Config` holds for this stack.

    Bad input stops the program with the same one-line message `grpo-infra synth` prints.
    """
    stack = pulumi.get_stack()
    source = stack_source(stack)
    config: dict[str, Any] = {}
    secret_keys = set()
    # A secret environment is refused by the spec's own message, before Pulumi tries to parse the
    # encrypted value as an object.
    raw = get_config(ENVIRONMENT_KEY) if is_config_secret(ENVIRONMENT_KEY) else None
    if raw is not None:
        config[ENVIRONMENT_KEY] = raw
        secret_keys.add(ENVIRONMENT_KEY)
    else:
        raw = pulumi.Config(PROJECT).get_object("environment")
        if raw is not None:
            config[ENVIRONMENT_KEY] = raw
        refs = raw.get("job", {}).get("secrets", []) if isinstance(raw, dict) else []
        for ref in refs if isinstance(refs, list) else []:
            key = f"{PROJECT}:{ref.get('config')}" if isinstance(ref, dict) else None
            if key and get_config(key) is not None:
                config[key] = "<set>"
                if is_config_secret(key):
                    secret_keys.add(key)
    try:
        # The image lock is a file beside the stack file (stacks/locks/<stack>.txt), read as the CLI reads it.
        env = with_lock(environment_from_config(config, secret_keys, source), PROJECT_DIR, stack, source)
    except SpecError as exc:
        raise pulumi.RunError(exc.render()) from None
    found = violations(env)
    if found:
        lines = "\n".join(f"  - {v.line()}" for v in found)
        raise pulumi.RunError(f"{source}: the gang is infeasible; nothing applied:\n{lines}")
    return env


def deploy() -> None:
    """Build every component the stack's target needs and export what operators look up."""
    env = read_environment()
    if env.target == "kubernetes":
        from .kubernetes import deploy_kubernetes
        from .nodepools import deploy_node_pools

        # The gang's pods can only start once their nodes exist: everything scheduled onto a pool
        # depends on the resources that create (or label) it. `nodesExist`: the pools' nodes were made
        # outside this stack (a rehearsal's local nodes, grpo_infra/rehearsal): none is created here.
        nodes_exist = pulumi.Config(PROJECT).get_bool("nodesExist") or False
        pools = [] if nodes_exist else deploy_node_pools(env)
        # Set by `grpo-infra up` against the local cluster, whose operators run as processes.
        installed = pulumi.Config(PROJECT).get_bool("operatorsInstalled") or False
        deploy_kubernetes(env, depends_on=pools, install_operators=not installed)
    else:
        from .slurm import deploy_slurm

        deploy_slurm(env)
