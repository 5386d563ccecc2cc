"""Shared fixtures: the project root and the shipped stacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.spec import list_stacks

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_STACKS = list_stacks(ROOT)


@pytest.fixture
def root() -> Path:
    return ROOT
