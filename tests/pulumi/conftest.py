"""Recording a stack's Pulumi program under the SDK's mock runtime, and stack files to vary."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.pulumi_graph import Graph, record
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_STACKS = ("eks-prod", "gke-dev", "onprem-k8s")
# The cloud provider SDK each shipped stack needs beyond the base install.
NEEDS = {"eks-prod": "pulumi_aws", "gke-dev": "pulumi_gcp"}

_cache: dict[str, Graph] = {}


def needs_extra(stack: str) -> None:
    """Skip (saying which extra is missing) when this stack's provider SDK is not installed."""
    module = NEEDS.get(stack)
    if module and importlib.util.find_spec(module) is None:
        extra = module.removeprefix("pulumi_")
        unavailable(f"{stack} needs {module.replace('_', '-')} (pip install -e '.[{extra}]')")


def shipped_graph(stack: str) -> Graph:
    """The recorded graph of a shipped stack (recorded once per test session)."""
    needs_extra(stack)
    if stack not in _cache:
        _cache[stack] = record(stack, ROOT)
    return _cache[stack]


def stack_document(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def variant(tmp_path: Path) -> Callable[[str, Callable[[dict[str, Any]], None]], Path]:
    """Write a copy of a shipped stack, changed by `edit(environment)`, under a fresh root; return the root."""

    def make(stack: str, edit: Callable[[dict[str, Any]], None]) -> Path:
        document = stack_document(stack)
        edit(document["config"]["grpo-infra:environment"])
        (tmp_path / "stacks").mkdir(exist_ok=True)
        (tmp_path / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
        return tmp_path

    return make
