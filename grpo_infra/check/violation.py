"""A feasibility violation: what is wrong, where in the spec, and by how much."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.check_rules import RULES


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    message: str
    by: str = ""

    def __post_init__(self) -> None:
        # A rule missing from the registry would be undocumented and could not be waived: refuse it where
        # it is made, so a new rule cannot ship without its row in docs/check.md.
        if self.rule not in RULES:
            raise ValueError(f"rule {self.rule!r} is not registered in grpo_infra/spec/check_rules.py")

    def line(self) -> str:
        amount = f" (by {self.by})" if self.by else ""
        return f"{self.where}: {self.message}{amount} [{self.rule}]"
