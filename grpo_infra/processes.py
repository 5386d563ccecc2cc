"""Helpers for the local clusters' daemons (the Slurm sandbox and the local Kubernetes): wait for a
condition, find a daemon again by its pid file, stop a set of daemons."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def wait_for(predicate: Callable[[], bool], timeout: float, error: Exception, interval: float = 0.2) -> None:
    """Poll `predicate` until it is true; raise `error` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise error


def pid_of(pidfile: Path, marker: str) -> int | None:
    """The pid a pid file names, only if that process's command line mentions `marker` (the
    cluster's root): a recycled pid never gets another program killed."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        environ = b""
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if marker in cmdline or marker.encode() in environ else None


def stop(pids: list[int], grace: float = 3) -> None:
    """TERM all at once, then KILL whatever is left after the grace period."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a child we started but have not reaped counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
