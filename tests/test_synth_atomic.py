"""A synth that fails half-way leaves the previous tree exactly as it was, and no debris beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grpo_infra import synth
from grpo_infra.spec import load_stack
from tests.conftest import ROOT


def _tree(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in sorted(where.rglob("*")) if p.is_file()}


@pytest.fixture
def previous(tmp_path: Path) -> Path:
    """An earlier synth's tree, with a file the new one would remove."""
    target = tmp_path / "out" / "local-slurm"
    synth.write_tree({"slurm/old.conf": "from an earlier synth\n", "README": "kept\n"}, target)
    return target


def _files() -> dict[str, str]:
    return synth.render(load_stack("local-slurm", ROOT).environment)


def test_a_failure_while_writing_the_new_files_keeps_the_old_tree(
    previous: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _tree(previous)
    real, written = Path.write_text, []

    def fail_on_third(self: Path, *args: object, **kwargs: object) -> int:
        written.append(self)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", fail_on_third)
    with pytest.raises(OSError, match="No space left"):
        synth.write_tree(_files(), previous)
    assert _tree(previous) == before
    assert sorted(p.name for p in previous.parent.iterdir()) == ["local-slurm"], "staging left behind"


def test_a_failure_while_swapping_puts_the_old_tree_back(previous: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _tree(previous)
    real, calls = os.replace, []

    def fail_second(src: object, dst: object) -> None:
        calls.append((src, dst))
        if len(calls) == 2:  # the new tree moving into place
            raise OSError(5, "Input/output error")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(synth.os, "replace", fail_second)
    with pytest.raises(OSError, match="Input/output"):
        synth.write_tree(_files(), previous)
    assert _tree(previous) == before
    assert sorted(p.name for p in previous.parent.iterdir()) == ["local-slurm"], "staging left behind"


def test_a_successful_write_replaces_the_whole_tree(previous: Path) -> None:
    files = _files()
    synth.write_tree(files, previous)
    assert _tree(previous) == {rel: text.encode() for rel, text in files.items()}
    assert sorted(p.name for p in previous.parent.iterdir()) == ["local-slurm"]
