"""Shared fixtures: the project root and the shipped stacks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from grpo_infra.spec import list_stacks

if TYPE_CHECKING:
    from tests.kube.conftest import LocalClusters

# Tests talk to nothing outside this machine: Ray's usage reporting stays off in every Ray they start.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_STACKS = list_stacks(ROOT)


def unavailable(reason: str) -> None:
    """Skip a test whose tool is missing on a developer's machine; fail it in CI, which installs everything."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI installs it (scripts/setup.sh, scripts/install-system-deps.sh)")
    pytest.skip(reason, allow_module_level=True)


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def local_clusters() -> Iterator[LocalClusters]:
    """The one local Kubernetes of this session, shared by the modules that want the same one and torn
    down at the session's end (tests/kube/conftest.py); here, so tests outside tests/kube share it too."""
    from tests.kube.conftest import LocalClusters

    clusters = LocalClusters()
    try:
        yield clusters
    finally:
        clusters.close()
