"""Unpacking tar archives the project builds or reads (OCI image layouts, `git archive` trees) safely on
every Python the project supports.

Python's `data` extraction filter (PEP 706) refuses members that would land outside the destination,
device files and links that point out of it. It exists from Python 3.11.4 (and 3.12) on; Debian 12
ships 3.11.2, which `requires-python` admits. There the same rules are checked here before anything is
written, so an archive is never unpacked unchecked.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path


class UnsafeArchive(ValueError):
    """A member would be written outside the destination, or is a device or FIFO."""


def extract_all(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack every member of `tar` under `dest`, refusing the archive whole if any member is unsafe."""
    if hasattr(tarfile, "data_filter"):
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as err:
            raise UnsafeArchive(str(err)) from err
        return
    members = tar.getmembers()
    for member in members:
        _check(member, dest)
    tar.extractall(dest, members=members)


def _check(member: tarfile.TarInfo, dest: Path) -> None:
    """The `data` filter's refusals, for Pythons that lack it."""
    root = os.path.realpath(dest)
    target = os.path.realpath(os.path.join(root, member.name))
    if os.path.isabs(member.name) or not _inside(target, root):
        raise UnsafeArchive(f"{member.name!r} would be written outside {dest}")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeArchive(f"{member.name!r} is a device or FIFO")
    if member.issym():
        link = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname))
        if os.path.isabs(member.linkname) or not _inside(link, root):
            raise UnsafeArchive(f"{member.name!r} links outside {dest} (to {member.linkname!r})")
    if member.islnk() and not _inside(os.path.realpath(os.path.join(root, member.linkname)), root):
        raise UnsafeArchive(f"{member.name!r} links outside {dest} (to {member.linkname!r})")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root
