"""Kubernetes stacks and variants of them (Volcano, a changed pool) for the renderer tests."""

from __future__ import annotations

from typing import Any

from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT, SHIPPED_STACKS

K8S_STACKS = [s for s in SHIPPED_STACKS if load_stack(s, ROOT).environment.target == "kubernetes"]


def env_of(stack: str) -> Environment:
    return load_stack(stack, ROOT).environment


def variant(stack: str, *changes: Any) -> Environment:
    """The stack's environment with each `change(raw_dict)` applied, validated again."""
    raw = env_of(stack).model_dump(by_alias=True, exclude_none=True)
    for change in changes:
        change(raw)
    return Environment.model_validate(raw)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def without_stand_ins(raw: dict[str, Any]) -> None:
    """The job as a GPU cluster runs it: verl behind the fabric gate. The local stack swaps in the probe and
    turns the gate off for its CPU image; the rules for verl's command and the gate still hold for it."""
    raw["job"].pop("probe", None)
    raw["job"].get("preflight", {}).get("nccl", {}).pop("enabled", None)


def verl_job(stack: str) -> Environment:
    """`stack` running verl behind its gate (`without_stand_ins`)."""
    return variant(stack, without_stand_ins)
