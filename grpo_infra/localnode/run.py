"""One command of the local-node layer, with its failure as one line."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


class LocalNodeError(Exception):
    """A command that builds the local nodes failed; the message is the one line to show."""


def run(cmd: Sequence[str], *, check: bool = True, env: dict[str, str] | None = None, timeout: float = 30) -> str:
    """`cmd`'s stdout; with `check`, a missing program or a failure is one LocalNodeError line."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except FileNotFoundError:
        if check:
            raise LocalNodeError(f"`{cmd[0]}` is not installed; run scripts/install-system-deps.sh") from None
        return ""
    if check and proc.returncode != 0:
        raise LocalNodeError(
            f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout
