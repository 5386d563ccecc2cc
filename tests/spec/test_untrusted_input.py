"""A stack file is untrusted input: whatever it holds, `synth` refuses it in one line (exit 2), naming the
file and the field, quickly, and writes nothing; or accepts it and renders nothing it did not mean."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.spec import reading

SHIPPED = Path(__file__).parents[2] / "stacks"
BASE = (SHIPPED / "Pulumi.local-slurm.yaml").read_text()
SOURCE = "stacks/Pulumi.bad.yaml"


def _project(tmp_path: Path, text: str | bytes, stack: str = "bad") -> Path:
    (tmp_path / "stacks").mkdir(exist_ok=True)
    (tmp_path / "Pulumi.yaml").write_text("name: grpo-infra\nruntime: python\nstackConfigDir: stacks\n")
    target = tmp_path / "stacks" / "Pulumi.bad.yaml"
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return tmp_path


def refusal(tmp_path: Path, text: str | bytes, stack: str = "bad", budget_s: float = 2.0) -> str:
    """The one line `synth` prints refusing `text` as a stack file; fails unless refused in budget, writing nothing."""
    root = _project(tmp_path, text)
    out = tmp_path / "out"
    began = time.monotonic()
    result = CliRunner().invoke(app, ["synth", stack, "--root", str(root), "--out", str(out)])
    elapsed = time.monotonic() - began
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), "refused by raising, not exiting"
    assert not out.exists(), "a refused stack must not write anything"
    assert elapsed < budget_s, f"refusal took {elapsed:.1f} s"
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def with_description(value: str) -> str:
    """The shipped local-slurm stack with its `description:` line replaced by raw YAML."""
    line = next(ln for ln in BASE.splitlines() if ln.strip().startswith("description:"))
    return BASE.replace(line, f"    description: {value}")


FIELD = "grpo-infra:environment.description"


def test_deep_nesting_is_refused_in_one_line_naming_the_field(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("[" * 1000 + "]" * 1000))
    assert SOURCE in message and FIELD in message
    assert "nested deeper than" in message


def test_deep_mappings_are_refused_too(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("{a: " * 1000 + "1" + "}" * 1000))
    assert FIELD in message and "nested deeper than" in message


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("&a [*a]"))
    assert FIELD in message and "anchors and aliases" in message and "line 6, column 18" in message


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    bomb = ["config:", '  x:a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        bomb.append(f"  x:{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    message = refusal(tmp_path, "\n".join(bomb) + "\n", budget_s=1.0)
    assert "x:a" in message and "anchors and aliases" in message


def test_a_complex_key_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("x\n    ? [a, b]\n    : 1"))
    assert "grpo-infra:environment" in message and "mapping key must be a plain scalar" in message


def test_a_merge_key_is_refused_with_a_clear_line(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("x\n    <<: {target: slurm}"))
    assert "merge keys (<<)" in message and "line 7, column 5" in message


def test_an_explicit_tag_that_builds_no_plain_value_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("!!binary AAAA"))
    assert FIELD in message and "tag:yaml.org,2002:binary" in message


def test_a_nul_byte_is_named_by_line_and_column(tmp_path: Path) -> None:
    message = refusal(tmp_path, with_description("abc\x00def"))
    assert "line 6, column 21" in message and "\\x00" in message and "\x00" not in message


def test_a_binary_file_is_refused_by_line_and_column(tmp_path: Path) -> None:
    message = refusal(tmp_path, b"config:\n  a: \xff\xfe\x00binary")
    assert SOURCE in message and "not UTF-8" in message and "line 2, column 6" in message


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    message = refusal(tmp_path, BASE + "#" * (2 * 1024 * 1024) + "\n")
    assert SOURCE in message and "larger than 1024 KiB" in message


def test_a_stack_name_too_long_for_a_file_name_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, BASE, stack="s" * 300)
    assert "300 characters" in message and "s" * 41 not in message


@pytest.mark.parametrize("name", ["a\nb", "a\x7fb", "a\x1b[31mb", "../bad"])
def test_a_stack_name_with_control_characters_is_refused_escaped(tmp_path: Path, name: str) -> None:
    message = refusal(tmp_path, BASE, stack=name)
    assert "stack name" in message
    assert all(ch not in message for ch in "\x7f\x1b")


def test_an_image_lock_is_read_with_a_bound_and_named_when_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is a file of the stack like the stack file itself: a runaway one is refused, not read whole."""
    monkeypatch.setattr(reading, "MAX_LOCK_BYTES", 64 * 1024)
    root = _project(tmp_path, (SHIPPED / "Pulumi.local-k8s.yaml").read_text())
    (root / "stacks" / "locks").mkdir()
    (root / "stacks" / "locks" / "bad.txt").write_text("numpy==2.0 --hash=sha256:00\n" * 4096)
    result = CliRunner().invoke(app, ["synth", "bad", "--root", str(root), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert (
        result.output.strip()
        == "error: stacks/locks/bad.txt: larger than 64 KiB; an image lock is a few hundred KiB of hashes"
    )
    assert not (tmp_path / "out").exists()
