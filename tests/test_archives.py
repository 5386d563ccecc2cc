"""Archives the project unpacks (image layouts, `git archive` trees) stay inside their destination on
every supported Python, with or without the standard library's `data` filter (Python >= 3.11.4)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from grpo_infra.archives import UnsafeArchive, extract_all


@pytest.fixture(params=["this-python", "without-data-filter"])
def python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each case as on this interpreter and as on Debian 12's Python 3.11.2, which lacks the filter."""
    if request.param == "without-data-filter" and hasattr(tarfile, "data_filter"):
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


def archive(*members: tuple[str, bytes | None, str | None, bytes]) -> tarfile.TarFile:
    """(name, contents or None, link target or None, type) tuples as an opened in-memory tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, link, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if link is not None:
                info.linkname = link
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def test_a_plain_tree_is_unpacked_with_its_links(python: str, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    tar = archive(
        ("blobs", None, None, tarfile.DIRTYPE),
        ("blobs/sha256", b"layer", None, tarfile.REGTYPE),
        ("index.json", b"{}", None, tarfile.REGTYPE),
        ("latest", None, "blobs/sha256", tarfile.SYMTYPE),
    )
    extract_all(tar, dest)
    assert (dest / "blobs" / "sha256").read_bytes() == b"layer"
    assert (dest / "latest").resolve() == (dest / "blobs" / "sha256").resolve()


@pytest.mark.parametrize(
    "member",
    [
        ("../escaped", b"x", None, tarfile.REGTYPE),
        ("a/../../escaped", b"x", None, tarfile.REGTYPE),
        ("link", None, "../escaped", tarfile.SYMTYPE),
        ("link", None, "/etc/passwd", tarfile.SYMTYPE),
        ("hard", None, "../escaped", tarfile.LNKTYPE),
        ("dev", None, None, tarfile.CHRTYPE),
        ("fifo", None, None, tarfile.FIFOTYPE),
    ],
    ids=["dotdot", "nested-dotdot", "symlink-out", "symlink-absolute", "hardlink-out", "device", "fifo"],
)
def test_a_member_that_leaves_the_destination_is_refused(
    python: str, tmp_path: Path, member: tuple[str, bytes | None, str | None, bytes]
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "escaped").write_text("untouched")
    with pytest.raises(UnsafeArchive):
        extract_all(archive(member), dest)
    assert (tmp_path / "escaped").read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "escaped"]
