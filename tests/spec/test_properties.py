"""Property tests: any edit of a valid stack is either accepted or refused as bad input, never a crash;
derived sizes always agree with the pools they come from."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_infra.spec import ENVIRONMENT_KEY, SpecError, environment_from_config
from tests.conftest import ROOT, SHIPPED_STACKS

CONFIGS = {s: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{s}.yaml").read_text())["config"] for s in SHIPPED_STACKS}

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _secret_keys(config: dict) -> set[str]:
    return {k for k, v in config.items() if isinstance(v, dict) and set(v) == {"secure"}}


@st.composite
def edited_configs(draw: st.DrawFn) -> dict:
    stack = draw(st.sampled_from(SHIPPED_STACKS))
    config = copy.deepcopy(CONFIGS[stack])
    env = config[ENVIRONMENT_KEY]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(env)
        path = draw(st.sampled_from(paths))
        parent = env
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add-key"]))
        if action == "replace":
            parent[path[-1]] = draw(_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(_values)
        if not isinstance(env, dict):
            break
    return config


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited_configs())
def test_any_edit_is_accepted_or_refused_cleanly(config: dict) -> None:
    try:
        env = environment_from_config(config, _secret_keys(config), "stacks/Pulumi.fuzz.yaml")
    except SpecError as exc:
        message = exc.render()
        assert message.startswith("stacks/Pulumi.fuzz.yaml: ")
        # pydantic's own rendering (type codes, the input's repr, its docs link) never reaches the user.
        for raw in ("errors.pydantic.dev", "input_value=", "[type=", "validation error for"):
            assert raw not in message, message
        return
    gang = env.gang
    assert 1 <= gang.nodes <= gang.pool.node_count
    assert gang.world_size == gang.nodes * gang.pool.gpu.per_node


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.integers(min_value=1, max_value=2048),
    per_node=st.integers(min_value=1, max_value=16),
    job_nodes=st.integers(min_value=1, max_value=2048),
)
def test_gang_is_derived_from_the_pool(nodes: int, per_node: int, job_nodes: int) -> None:
    config = copy.deepcopy(CONFIGS["eks-prod"])
    env_raw = config[ENVIRONMENT_KEY]
    env_raw["pools"][0]["nodes"] = nodes
    env_raw["pools"][0]["gpu"]["perNode"] = per_node
    env_raw["tenants"][0]["gpuQuota"] = 0
    env_raw["job"]["nodes"] = job_nodes
    try:
        env = environment_from_config(config, _secret_keys(config), "stacks/Pulumi.p.yaml")
    except SpecError as exc:
        assert job_nodes > nodes
        assert f"job.nodes {job_nodes} is more than pool" in exc.render()
        return
    assert job_nodes <= nodes
    assert env.gang.world_size == job_nodes * per_node
    assert env.pools[0].gpu_count == nodes * per_node
