"""What a stack says about `check`'s rules: the ones it waives, each with the reason a reader will see.

A waiver is for a rule whose model does not fit this environment (a quota the platform enforces
elsewhere, a warning that does not apply), never a way to hide a stack that cannot run: the waived rule
is still judged and shown, with its reason, in every `check`. The rule ids are those of the registry
(`grpo_infra/spec/check_rules.py`, listed in docs/check.md); an id the registry does not know is refused
when the stack loads, as is a rule after which there is nothing right to render.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from .base import SpecModel

# One line a reader can take in beside the violation it excuses.
MAX_REASON = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Waiver(SpecModel):
    """A rule this stack accepts breaking, and why."""

    rule: Annotated[str, StringConstraints(max_length=64)]
    """The id of a rule of docs/check.md, such as `slurm-qos-default`."""
    reason: Annotated[str, StringConstraints(max_length=MAX_REASON)]
    """Why the rule does not hold here: one line, shown beside the waived violation in `check`'s output."""

    @field_validator("rule")
    @classmethod
    def _registered(cls, rule_id: str) -> str:
        # Read when a waiver is given, not when the spec is imported: the registry sits in the check package.
        from .check_rules import RULES

        rule = RULES.get(rule_id)
        if rule is None:
            raise ValueError(f"unknown rule {rule_id!r} (see docs/check.md)")
        if not rule.waivable:
            raise ValueError(f"rule {rule_id} cannot be waived: {rule.unwaivable}")
        return rule_id

    @field_validator("reason")
    @classmethod
    def _one_line(cls, reason: str) -> str:
        if not reason.strip():
            raise ValueError("a waiver needs a reason: say why the rule does not hold here")
        if _CONTROL.search(reason):
            raise ValueError("one line of text, without control characters (newlines, tabs, escapes)")
        return reason


class Checks(SpecModel):
    """How `check` treats this stack: the rules it waives (docs/check.md, "Waivers")."""

    waive: list[Waiver] = Field(default_factory=list, max_length=64)
    """Rules whose violations do not fail `check`, `synth` or the Pulumi program; each is shown with its reason."""

    @model_validator(mode="after")
    def _once_each(self) -> Checks:
        seen: set[str] = set()
        for i, waiver in enumerate(self.waive):
            if waiver.rule in seen:
                raise ValueError(f"waive[{i}].rule: {waiver.rule} is waived twice")
            seen.add(waiver.rule)
        return self

    def reason(self, rule_id: str) -> str | None:
        """The reason `rule_id` is waived; None when it is not."""
        return next((w.reason for w in self.waive if w.rule == rule_id), None)

    def off_target(self, target: str) -> str | None:
        """A waiver of a rule that can never fire on `target`, as a line naming it; None when all can."""
        from .check_rules import RULES

        for i, waiver in enumerate(self.waive):
            rule_target = RULES[waiver.rule].target
            if rule_target not in ("any", target):
                return (
                    f"checks.waive[{i}].rule: {waiver.rule} is a {rule_target} rule; a {target} stack never breaks it"
                )
        return None
