"""The gate's settings come from the stack: fabric and gang from the pool, thresholds from `job.preflight.nccl`."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.preflight.gate import gate_command, gate_settings
from grpo_infra.preflight.ray_allreduce import _options, _parser
from grpo_infra.spec import ENVIRONMENT_KEY, Environment, SpecError, environment_from_config, load_stack
from tests.conftest import ROOT, SHIPPED_STACKS


def _config(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def _with_gate(stack: str, nccl: dict[str, Any]) -> Environment:
    config = copy.deepcopy(_config(stack))
    config[ENVIRONMENT_KEY]["job"]["preflight"] = {"nccl": nccl}
    return environment_from_config(
        config, {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}, stack
    )


def test_infiniband_pool_gets_the_documented_ndr_default() -> None:
    env = load_stack("onprem-slurm", ROOT).environment
    settings = gate_settings(env)
    assert env.gang.pool.fabric.kind == "infiniband"
    assert (settings.fabric, settings.gpus_per_node, settings.nodes) == ("infiniband", 8, env.gang.nodes)
    assert settings.enabled and settings.backend == "nccl"
    # the published 4-node NDR figure, NVIDIA/nccl-tests#309 (docs/nccl-preflight.md)
    assert settings.expected_busbw_gbps == 365.84
    assert settings.fraction == 0.8
    assert settings.threshold_gbps == 292.67


def test_efa_and_roce_pools_get_their_defaults() -> None:
    assert gate_settings(load_stack("eks-prod", ROOT).environment).expected_busbw_gbps == 356.99  # 4 x p5
    assert gate_settings(load_stack("onprem-k8s", ROOT).environment).expected_busbw_gbps == 365.84


def test_sandbox_stack_runs_gloo_across_its_three_nodes_with_no_bandwidth_default() -> None:
    settings = gate_settings(load_stack("local-slurm", ROOT).environment)
    assert (settings.fabric, settings.backend, settings.nodes, settings.gpus_per_node) == ("none", "gloo", 3, 8)
    assert settings.expected_busbw_gbps is None and settings.threshold_gbps is None


def test_stated_expectation_and_fraction_win_over_the_default() -> None:
    settings = gate_settings(_with_gate("onprem-slurm", {"expectedBusbwGbps": 392.5, "fraction": 0.9}))
    assert settings.expected_busbw_gbps == 392.5
    assert settings.threshold_gbps == 353.25


def test_gate_switched_off_gives_no_command() -> None:
    assert gate_command(_with_gate("onprem-slurm", {"enabled": False})) is None
    assert gate_command(load_stack("onprem-slurm", ROOT).environment) is not None


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_command_line_is_what_the_program_parses(stack: str) -> None:
    """The sbatch and the RayJob run this line: the program must read back exactly the stack's settings."""
    settings = gate_settings(load_stack(stack, ROOT).environment)
    line = shlex.split(settings.command(python="python3", json_out="/tmp/gate.json"))
    assert line[:3] == ["python3", "-m", "grpo_infra.preflight.ray_allreduce"]
    args = _parser().parse_args(line[3:])
    options = _options(args)
    assert args.json_out == Path("/tmp/gate.json")
    assert (options.fabric, options.gpus_per_node, options.nodes) == (
        settings.fabric,
        settings.gpus_per_node,
        settings.nodes,
    )
    assert options.expected == settings.expected_busbw_gbps
    assert (options.fraction, options.backend, options.size_mib, options.iterations, options.timeout_seconds) == (
        settings.fraction,
        settings.backend,
        settings.size_mib,
        settings.iterations,
        settings.timeout_seconds,
    )


@pytest.mark.parametrize(
    ("nccl", "message"),
    [
        ({"fraction": 0}, "preflight.nccl.fraction: input should be greater than 0"),
        ({"fraction": 1.5}, "preflight.nccl.fraction: input should be less than or equal to 1"),
        ({"expectedBusbwGbps": -3}, "preflight.nccl.expectedBusbwGbps: input should be greater than 0"),
        ({"backend": "mpi"}, "preflight.nccl.backend: input should be 'nccl' or 'gloo'"),
        ({"fractoin": 0.5}, "unknown key; did you mean `fraction`?"),
        ({"sizeMib": 0}, "preflight.nccl.sizeMib: input should be greater than or equal to 1"),
    ],
)
def test_bad_gate_settings_are_rejected_with_where_and_why(nccl: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        _with_gate("onprem-slurm", nccl)


def test_the_spec_offers_exactly_the_backends_and_fabrics_the_gate_knows() -> None:
    """The spec's choices and the gate's must not drift: a value one accepts the other would refuse."""
    import typing

    from grpo_infra.preflight.ray_allreduce import BACKENDS
    from grpo_infra.preflight.verdict import FABRIC_KINDS
    from grpo_infra.spec.job import NcclGate
    from grpo_infra.spec.pools import Fabric

    assert set(typing.get_args(NcclGate.model_fields["backend"].annotation)) == set(BACKENDS)
    assert set(typing.get_args(Fabric.model_fields["kind"].annotation)) == set(FABRIC_KINDS)
