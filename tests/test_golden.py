"""Every shipped stack's `synth` tree is the golden tree kept in `tests/golden/<stack>/`, byte for byte.

A renderer change (or a stack file's) fails here with the diff a reviewer reads, until the golden trees are
refreshed on purpose (`python -m tests.golden`) and the refreshed files are committed with the change. The
tree is rendered away from the checkout, as another user on another machine would: the output must not
depend on where the project lives, who runs it, or when.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra.spec import list_stacks
from tests.golden import GOLDEN, REFRESH, ROOT, golden_stacks, synth, tree

SHIPPED = list_stacks(ROOT)

# A failure shows the diff of at most this many files, each cut to this many lines.
DIFF_FILES = 3
DIFF_LINES = 60


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run from another directory, as another user with another home, in another time zone."""
    monkeypatch.chdir(tmp_path)
    for name, value in {"HOME": str(tmp_path), "USER": "golden-reviewer", "LOGNAME": "golden-reviewer"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    yield tmp_path
    monkeypatch.undo()
    time.tzset()


def _diff(path: str, golden: bytes, rendered: bytes) -> list[str]:
    lines = list(
        difflib.unified_diff(
            golden.decode(errors="replace").splitlines(),
            rendered.decode(errors="replace").splitlines(),
            f"golden/{path}",
            f"rendered/{path}",
            lineterm="",
        )
    )
    return lines[:DIFF_LINES] + ([f"... {len(lines) - DIFF_LINES} more diff lines"] if len(lines) > DIFF_LINES else [])


def difference(stack: str, golden: dict[str, bytes], rendered: dict[str, bytes]) -> str:
    """What differs between the golden and the rendered tree, as a reviewer reads it ('' when nothing)."""
    added = sorted(rendered.keys() - golden.keys())
    removed = sorted(golden.keys() - rendered.keys())
    changed = sorted(p for p in golden.keys() & rendered.keys() if golden[p] != rendered[p])
    if not (added or removed or changed):
        return ""
    out = [f"{stack}: the rendered tree differs from tests/golden/{stack}/"]
    for label, paths in (("added", added), ("removed", removed), ("changed", changed)):
        if paths:
            out.append(f"  {label} ({len(paths)}): {', '.join(paths[:10])}{' ...' if len(paths) > 10 else ''}")
    for path in changed[:DIFF_FILES]:
        out += _diff(path, golden[path], rendered[path])
    for path in added[: max(0, DIFF_FILES - len(changed))]:
        out += _diff(path, b"", rendered[path])
    out.append(f"If the change is intended: {REFRESH}, then review and commit `git diff tests/golden`.")
    return "\n".join(out)


@pytest.mark.parametrize("stack", SHIPPED)
def test_synth_renders_the_golden_tree(stack: str, elsewhere: Path) -> None:
    assert (GOLDEN / stack).is_dir(), f"no golden tree for {stack}: {REFRESH}"
    rendered = synth(stack, elsewhere / "out")
    message = difference(stack, tree(GOLDEN / stack), rendered)
    if message:
        pytest.fail(message, pytrace=False)


def test_every_golden_tree_is_a_shipped_stack() -> None:
    assert golden_stacks() == SHIPPED, f"golden trees of stacks that do not ship: {REFRESH}"


def test_a_difference_names_the_files_and_shows_their_diff() -> None:
    """A changed character is shown as a diff line; added and removed files by name; the refresh command."""
    golden = {"helm/a.yaml": b"chart: x\nversion: 1\n", "gone.yaml": b"kind: Gone\n"}
    rendered = {"helm/a.yaml": b"chart: x\nversion: 2\n", "new.yaml": b"kind: New\n"}
    message = difference("s", golden, rendered)
    assert "removed (1): gone.yaml" in message and "added (1): new.yaml" in message
    assert "-version: 1\n+version: 2" in message and "+kind: New" in message
    assert REFRESH in message
    assert difference("s", golden, dict(golden)) == ""
    long = difference("s", {"f": "".join(f"{i}\n" for i in range(500)).encode()}, {"f": b""})
    assert len(long.splitlines()) < DIFF_LINES + 10, "a long diff is cut"
