"""The real Ray heads the tests start on loopback: a free port, and a stop without a fixed wait.

A head is `ray start --head --block` in its own process group. Stopping it is the group's business:
TERM to every process of the group (GCS, raylet, dashboard, agents, workers), then KILL to whatever
still runs after a short grace. `ray start --block` itself lingers on TERM (it waits on its children
for up to 30 s), and `ray stop` would stop every Ray on the machine, other tests' included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

GRACE = 3.0


def free_port() -> int:
    """A loopback port nothing listens on now (the head binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes], grace: float = GRACE) -> None:
    """TERM the head's process group, KILL what is left after `grace` seconds, reap the head."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _group_alive(process.pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process is in the group."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
