"""The real Ray heads the tests start on loopback: a free port, and a stop without a fixed wait.

A head is `ray start --head` (with `--block` unless asked) in its own process group. Stopping it is the group's business:
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
import sys
import time
from pathlib import Path

GRACE = 3.0
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    """A loopback port nothing listens on now (the head binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes], grace: float = GRACE) -> None:
    """TERM the head's process group, KILL what is left after `grace` seconds, reap the head."""
    with contextlib.suppress(ProcessLookupError):  # the group outlives a `ray start` without --block
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


def start(
    temp: Path, port: int, gpus: int = 2, config: dict[str, str] | None = None, block: bool = True
) -> subprocess.Popen[bytes]:
    """A job-private Ray head on loopback with `gpus` declared GPUs, in its own process group (stopped by
    `stop`, never `ray stop`); `config` adds RAY_* settings to its environment. `block=False` leaves out
    `--block`, whose supervisor ends the whole head once any of its processes exits (the autoscaler's
    monitor does, when the GCS does not answer for long): the head's daemons stay in the group."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(config or {})}
    return subprocess.Popen(
        [str(RAY), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=1", f"--num-gpus={gpus}", "--include-dashboard=false", f"--temp-dir={temp}",
         "--disable-usage-stats", *(["--block"] if block else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
