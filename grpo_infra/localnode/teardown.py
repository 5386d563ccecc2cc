"""The teardown both local clusters run: daemons by pid file, nodes by namespace, links by name,
files the cluster created outside its root, then the root itself. Safe to run any time."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ..processes import pid_of, stop
from .net import delete_links, namespaces
from .procs import kill_namespace
from .run import run


def stop_pidfiles(pidfiles: Iterable[Path], root: Path, grace: float = 3) -> list[str]:
    """TERM (then KILL) each daemon a pid file names, if its command line names `root`."""
    found = {f: pid_of(f, str(root)) for f in pidfiles}
    alive = {f: pid for f, pid in found.items() if pid is not None}
    stop(list(alive.values()), grace=grace)
    return [f"stopped {f.stem} ({pid})" for f, pid in alive.items()]


def remove_created(paths: Iterable[str]) -> list[str]:
    """Remove files and directories the cluster made outside its root (recorded when made)."""
    done = []
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        done.append(f"removed {path}")
    return done


def teardown(
    root: Path,
    *,
    pidfiles: Iterable[Path] = (),
    namespace_prefix: str | None = None,
    link_prefix: str | None = None,
    created: Iterable[str] = (),
    before_links: Callable[[], list[str]] | None = None,
    grace: float = 3,
) -> list[str]:
    """Stop the daemons, kill and delete the nodes' namespaces, delete the links, remove what was
    created outside the root and the root; returns what was done, one line each."""
    done = stop_pidfiles(list(pidfiles), root, grace=grace)
    if namespace_prefix:
        for ns in namespaces(namespace_prefix):
            killed = kill_namespace(ns)
            run(["ip", "netns", "del", ns], check=False)
            done.append(f"deleted namespace {ns} ({len(killed)} processes killed)")
    if before_links is not None:
        done += before_links()
    if link_prefix:
        done += [f"deleted link {name}" for name in delete_links(link_prefix)]
    done += remove_created(created)
    if root.exists():
        shutil.rmtree(root, ignore_errors=True)
        done.append(f"removed {root}")
    return done
