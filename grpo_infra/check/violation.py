"""A feasibility violation: what is wrong, where in the spec, and by how much."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    message: str
    by: str = ""

    def line(self) -> str:
        amount = f" (by {self.by})" if self.by else ""
        return f"{self.where}: {self.message}{amount} [{self.rule}]"
