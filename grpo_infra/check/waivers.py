"""A stack's waivers applied to what `check` found: a waived violation no longer refuses the stack, and is
still shown, with the stack's reason, wherever the violations are (docs/check.md, "Waivers")."""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import Environment
from .violation import Violation


@dataclass(frozen=True)
class Waived:
    """A violation the stack waives, and the reason the stack gives."""

    violation: Violation
    reason: str

    def line(self) -> str:
        return f"waived: {self.violation.line()}; reason: {self.reason}"


def waived(env: Environment, found: list[Violation]) -> list[Waived]:
    """The violations of `found` that `checks.waive` names, each with its reason."""
    out = []
    for violation in found:
        reason = env.checks.reason(violation.rule)
        if reason is not None:
            out.append(Waived(violation, reason))
    return out


def unwaived(env: Environment, found: list[Violation]) -> list[Violation]:
    """The violations of `found` that still count: the ones `checks.waive` does not name."""
    return [v for v in found if env.checks.reason(v.rule) is None]
