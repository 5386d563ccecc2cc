"""Malformed and hostile variants of the shipped stack files: each is refused by `synth` in one line (exit 2)
naming the file and the field or line, within 2 s, writing nothing; a variant `synth` accepts renders the same
files as the stack it came from."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.spec.load import ENVIRONMENT_KEY, _format_loc
from tests.conftest import ROOT, SHIPPED_STACKS

Path_ = tuple[str | int, ...]
DOCUMENTS = {s: yaml.safe_load((ROOT / "stacks" / f"Pulumi.{s}.yaml").read_text()) for s in SHIPPED_STACKS}
TEXTS = {s: (ROOT / "stacks" / f"Pulumi.{s}.yaml").read_text() for s in SHIPPED_STACKS}
# Characters no field of the spec accepts: controls, a line break, bidi overrides, zero-width and separators.
HIDDEN = ["\x00", "\x07", "\x1b[31m", "\x7f", "\n", "\r", "\t", "\u202e", "\u200b", "\u2028", "\ufeff"]
PAYLOADS = ["node[1-3] Prolog=/etc/slurm/p.sh", "$(touch pwned)", "`id`", '"; rm -rf ~ #', "x" * 5000]
runner = CliRunner()
# Typer builds the click command of the whole app on every invoke; built once, 500 cases fit in seconds.
COMMAND = get_command(app)


def leaves(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every scalar of the environment with its path inside the stack document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path, value


def environment_leaves(stack: str, kind: type | tuple[type, ...]) -> list[Path_]:
    env = DOCUMENTS[stack]["config"][ENVIRONMENT_KEY]
    return [(*p,) for p, v in leaves(env) if isinstance(v, kind) and not (kind is int and isinstance(v, bool))]


def replaced(stack: str, path: Path_, value: Any) -> dict[str, Any]:
    document = yaml.safe_load(TEXTS[stack])
    target = document["config"][ENVIRONMENT_KEY]
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return document


def field_of(path: Path_) -> str:
    """The field path as refusals spell it: `grpo-infra:environment.pools[0].hosts`."""
    return _format_loc(path)


def synth(stack: str, text: str) -> tuple[int, str, list[str], float]:
    """Exit code, output, the files written, and seconds, of `synth` on `text` as the stack file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(ROOT / "stacks" / "locks", root / "stacks" / "locks")
        (root / "Pulumi.yaml").write_text("name: grpo-infra\nruntime: python\nstackConfigDir: stacks\n")
        (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(text, encoding="utf-8")
        out = root / "out"
        began = time.monotonic()
        with mock.patch("typer.testing._get_command", lambda _app: COMMAND):
            result = runner.invoke(app, ["synth", stack, "--root", str(root), "--out", str(out)])
        elapsed = time.monotonic() - began
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) if out.exists() else []
        return result.exit_code, result.output, written, elapsed


def assert_refused(stack: str, text: str, *expected: str) -> None:
    code, output, written, elapsed = synth(stack, text)
    assert code == 2, output
    assert not written, "a refused stack must not write anything"
    assert elapsed < 2.0, f"took {elapsed:.1f} s"
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert f"stacks/Pulumi.{stack}.yaml" in lines[0]
    for fragment in expected:
        assert fragment in lines[0], (fragment, lines[0])
    assert not any(ch in lines[0] for ch in "\x00\x07\x1b\x7f\u202e\u200b\u2028\ufeff")


def dumped(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False, width=10_000)


stacks = st.sampled_from(SHIPPED_STACKS)
hidden_strings = st.builds(
    lambda before, char, after: before + char + after,
    st.text("abc/-_.019", max_size=8),
    st.sampled_from(HIDDEN),
    st.sampled_from(["", *PAYLOADS[:4]]),
)


@st.composite
def hidden_in_a_string_field(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    stack = draw(stacks)
    path = draw(st.sampled_from(environment_leaves(stack, str)))
    return stack, dumped(replaced(stack, path, draw(hidden_strings))), (field_of(path),)


@st.composite
def not_a_number_in_a_number_field(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    stack = draw(stacks)
    path = draw(st.sampled_from(environment_leaves(stack, (int, float))))
    value = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return stack, dumped(replaced(stack, path, value)), (field_of(path),)


@st.composite
def nested_too_deep(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    stack = draw(stacks)
    path = draw(st.sampled_from(environment_leaves(stack, (str, int, float))))
    value: Any = "x"
    for _ in range(draw(st.integers(40, 300))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return stack, dumped(replaced(stack, path, value)), ("nested deeper than", field_of(path))


@st.composite
def aliased(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    stack = draw(stacks)
    path = draw(st.sampled_from(environment_leaves(stack, (str, int, float))))
    cycle: list[Any] = []
    cycle.append(cycle)
    shared = {"a": 1}
    value = draw(st.sampled_from([cycle, [shared, shared]]))
    return stack, dumped(replaced(stack, path, value)), ("anchors and aliases",)


@st.composite
def control_character_in_the_text(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...]]:
    stack = draw(stacks)
    text = TEXTS[stack]
    at = draw(st.integers(0, len(text)))
    char = draw(st.sampled_from(["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x9b", "\ufffe"]))
    return stack, text[:at] + char + text[at:], ("line ", "column ")


VARIANTS = st.one_of(
    hidden_in_a_string_field(),
    not_a_number_in_a_number_field(),
    nested_too_deep(),
    aliased(),
    control_character_in_the_text(),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(VARIANTS)
def test_a_hostile_variant_of_a_shipped_stack_is_refused_in_one_line(variant: tuple[str, str, tuple[str, ...]]) -> None:
    stack, text, expected = variant
    assert_refused(stack, text, *expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.sampled_from(["local-slurm", "local-k8s"]), st.sampled_from(PAYLOADS), st.data())
def test_a_shell_payload_in_a_string_field_is_refused_or_renders_the_same_files(
    stack: str, payload: str, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(environment_leaves(stack, str)))
    code, output, written, _ = synth(stack, dumped(replaced(stack, path, payload)))
    assert not (Path.cwd() / "pwned").exists()
    if code == 2:
        assert not written and len(output.strip().splitlines()) == 1, output
        assert field_of(path) in output or f"{ENVIRONMENT_KEY}:" in output, output
    elif code == 1:
        assert not written, "a stack `check` refuses is not rendered"
    else:
        assert code == 0, output
        assert written == shipped_files(stack), "an accepted value changed which files are rendered"


SHIPPED_FILES: dict[str, list[str]] = {}


def shipped_files(stack: str) -> list[str]:
    """The files `synth` renders for the shipped stack itself."""
    if stack not in SHIPPED_FILES:
        code, output, written, _ = synth(stack, TEXTS[stack])
        assert code == 0, output
        SHIPPED_FILES[stack] = written
    return SHIPPED_FILES[stack]
