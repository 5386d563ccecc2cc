"""Killing a local node the way a machine dies: every process at once, with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

from .net import namespace_pids


def kill_all(find: Callable[[], list[int]], timeout: float = 10) -> list[int]:
    """SIGKILL whatever `find()` returns until it returns nothing (a process that forks while it
    is being killed is found on the next round); returns the pids of the first round."""
    first = find()
    deadline = time.monotonic() + timeout
    pids = first
    while pids and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        pids = find()
    return first


def kill_namespace(namespace: str) -> list[int]:
    """Every process in a network namespace (a node's daemons and whatever they started there)."""
    return kill_all(lambda: namespace_pids(namespace))
