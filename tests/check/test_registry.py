"""Every rule `check` can report is registered once, with its doc line, and docs/check.md's tables are the
registry's: a rule cannot ship undocumented, and a documented rule cannot outlive its code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grpo_infra.check import UNRENDERABLE, of_severity
from grpo_infra.check.rule_tables import COMMAND, SOURCE_HEADER, refresh, sections_in, table
from grpo_infra.check.violation import Violation
from grpo_infra.spec.check_rules import LAUNCHERS, RULES, SECTIONS
from grpo_infra.spec.launchers import Launchers
from tests.conftest import ROOT

CHECK = ROOT / "grpo_infra" / "check"
DOC = ROOT / "docs" / "check.md"
# Rule ids the code computes (`port_range_violations` and `interface_violations` take the target's or the
# launcher's name, and only the `ray` launcher and Slurm share nodes between jobs): every id each can give.
COMPUTED = {
    "{target}-ports-ephemeral": {f"{t}-ports-ephemeral" for t in ("slurm", *LAUNCHERS)},
    "{target}-ports-block": {f"{t}-ports-block" for t in ("slurm", *LAUNCHERS)},
    "{target}-ports-shared-nodes": {"slurm-ports-shared-nodes", "ray-ports-shared-nodes"},
    "{target}-interface": {f"{t}-interface" for t in ("slurm", *LAUNCHERS)},
}


def _rule_argument(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "rule"), None)


def _template(node: ast.JoinedStr) -> str:
    """An f-string's text with each replacement field as `{name}`: `f"{target}-interface"` → that."""
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
        else:
            assert isinstance(value, ast.FormattedValue)
            parts.append("{" + ast.unparse(value.value) + "}")
    return "".join(parts)


def emitted(package: Path = CHECK) -> tuple[set[str], set[str]]:
    """(literal rule ids, f-string templates) of every `Violation(...)` in the package's source."""
    literals, templates = set(), set()
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Violation"):
                continue
            arg = _rule_argument(node)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                literals.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                templates.add(_template(arg))
            else:
                pytest.fail(f"{path.name}:{node.lineno}: a rule id that is neither a literal nor an f-string")
    return literals, templates


def test_the_scan_finds_the_rules_it_should(tmp_path: Path) -> None:
    """The scan itself sees literals, the `rule=` keyword and f-strings (it is what the next tests trust)."""
    (tmp_path / "rules.py").write_text(
        'out = [Violation("a-rule", "w", "m"), Violation(rule="b-rule", where="w", message="m")]\n'
        'more = [Violation(f"{target}-c-rule", "w", "m"), Other("not-a-rule")]\n'
    )
    assert emitted(tmp_path) == ({"a-rule", "b-rule"}, {"{target}-c-rule"})
    literals, _ = emitted()
    assert {"tenant-quota", "raycronjob-schedule", "pod-fits-real-node", "slurm-path-shared"} <= literals


def test_every_rule_the_code_emits_is_registered() -> None:
    literals, templates = emitted()
    assert templates == set(COMPUTED), "a computed rule id changed: list every id it can give in COMPUTED"
    ids = literals | set().union(*COMPUTED.values())
    assert sorted(ids - set(RULES)) == [], "add these rules to grpo_infra/spec/check_rules.py"


def test_every_registered_rule_is_emitted_somewhere() -> None:
    """No stale rows: a rule whose code is gone leaves the registry and the docs with it."""
    literals, _ = emitted()
    ids = literals | set().union(*COMPUTED.values())
    assert sorted(set(RULES) - ids) == []


def test_the_launchers_of_the_computed_ids_are_the_specs() -> None:
    """A new launcher gets ports and interface rules under its own name: the registry must list them."""
    assert set(LAUNCHERS) == set(Launchers.model_fields)


def test_an_unregistered_rule_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="'no-such-rule' is not registered"):
        Violation("no-such-rule", "grpo-infra:environment.job", "something")


def test_a_rule_found_with_another_severity_is_refused() -> None:
    """A warning listed among the violations would fail stacks the docs call fine (and the reverse)."""
    warning = Violation("slurm-qos-default", "grpo-infra:environment.tenants", "x")
    with pytest.raises(ValueError, match="registered as warning"):
        of_severity("error", [warning])
    assert of_severity("warning", [warning]) == [warning]


def test_the_warnings_table_holds_warnings_only() -> None:
    assert {r.severity for r in RULES.values() if r.section == "warnings"} == {"warning"}


def test_docs_rule_tables_are_generated_from_the_registry() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert refresh(text) == text, f"docs/check.md's rule tables are stale: run {COMMAND}"


def test_docs_show_every_section_once() -> None:
    """Every rule appears in the docs: each section's block is on the page exactly once."""
    assert sorted(sections_in(DOC.read_text(encoding="utf-8"))) == sorted(SECTIONS)


def test_the_tables_keep_the_upstream_source_column() -> None:
    both = table("both")
    assert SOURCE_HEADER in both
    assert (
        "| `verl-train-vs-mini` | `batch.train ≥ batch.mini` | `workers/config/actor.py`, `ActorConfig.validate` |"
        in both
    )
    assert "| `tenant-quota` |" in both and "| — |" in both
    assert SOURCE_HEADER not in table("slurm")


def test_a_warning_outside_the_warnings_table_says_so() -> None:
    assert "| `probe-real-gpus` | warning only: " in table("stand-in")


def test_the_kueue_model_table_is_not_a_rule_table() -> None:
    """Only rule tables are generated: the hand-written model of Kueue stays as written."""
    text = DOC.read_text(encoding="utf-8")
    assert "| rule | Kueue v0.19.2 |" in text
    edited = text.replace("Kueue v0.19.2 |", "Kueue v0.19.2 (edited) |")
    assert edited != text
    assert refresh(edited) == edited, "text outside the rules markers is kept as written"


def test_rules_after_which_nothing_renders_cannot_be_waived() -> None:
    assert all(not RULES[r].waivable for r in UNRENDERABLE)
    assert "Cannot be waived" in table("kinds")
