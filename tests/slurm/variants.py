"""Shipped Slurm stacks, and variants of them made by editing the loaded spec as a user would the YAML."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT

SLURM_STACKS = ["local-slurm", "onprem-slurm"]


def stack(name: str) -> Environment:
    return load_stack(name, ROOT).environment


def variant(name: str, edit: Callable[[dict[str, Any]], None]) -> Environment:
    """The stack's environment with `edit` applied to its camelCase dict, validated again."""
    data = stack(name).model_dump(by_alias=True, exclude_none=True)
    edit(data)
    return Environment.model_validate(data)
