"""What both local clusters share above their nodes: the verbs a lab answers to, and a bring-up made of named
steps.

A lab (the local Kubernetes, `grpo_infra/kube/cluster.py`; the Slurm sandbox, `grpo_infra/sandbox/cluster.py`)
is brought up as a list of named steps (kind's `Action` list is the model). When one fails, the error names
the step; the cluster's logs are copied out of its root first (its teardown removes the root), and the
cluster is torn down unless the caller asked to keep it for a look (`--keep-on-failure`). Each step's time is
kept in the cluster's state, for `status` to show where a slow bring-up went.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# What a lab's logs are named: its daemons' own logs and the output files they were started with.
LOG_PATTERNS = ("*.log", "*.out")
# A log longer than this is cut to its end when exported (a daemon's log of a long-lived cluster).
MAX_LOG_BYTES = 8 * 1024 * 1024


@runtime_checkable
class Lab(Protocol):
    """The verbs both local clusters answer to, each a module-level function of the lab's `cluster` module
    (`up` takes each lab's own options)."""

    def up(self, *args: Any, **kwargs: Any) -> Any: ...
    def down(self, root: Path = ...) -> list[str]: ...
    def status(self, root: Path = ...) -> str: ...
    def env_exports(self, root: Path = ...) -> str: ...
    def kill_node(self, name: str, root: Path = ...) -> list[int]: ...
    def boot_node(self, name: str, root: Path = ...) -> None: ...
    def export_logs(self, dest: Path, root: Path = ...) -> list[Path]: ...


def logs_dir(root: Path) -> Path:
    """Where a lab's logs are exported when its bring-up fails: beside its root, which a teardown removes."""
    return root.with_name(root.name + "-logs")


def export_logs(root: Path, dest: Path) -> list[Path]:
    """Copy every log under `root` to `dest` at the same relative path (the end of each, at most
    MAX_LOG_BYTES); `dest` is emptied first. Returns the files written."""
    shutil.rmtree(dest, ignore_errors=True)
    written = []
    sources = (
        sorted({p for pattern in LOG_PATTERNS for p in root.rglob(pattern) if p.is_file()}) if root.is_dir() else []
    )
    for source in sources:
        target = dest / source.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - MAX_LOG_BYTES))
            target.write_bytes(f.read())
        written.append(target)
    return written


class BringUp:
    """A lab's bring-up, step by step: `with bring_up.step("control plane"): ...`.

    A step that fails is raised again as the lab's own `error` naming the step, once the logs are copied out
    (`logs_dir`) and the lab torn down (`teardown`, which must be safe at any point), unless `keep`. An
    interrupt is torn down the same way and goes on as an interrupt."""

    def __init__(
        self, lab: str, root: Path, teardown: Callable[[], object], error: type[Exception], *, keep: bool = False
    ) -> None:
        self.lab, self.root, self._teardown, self._error, self._keep = lab, root, teardown, error, keep
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        except BaseException as exc:
            self.seconds[name] = round(time.monotonic() - started, 1)
            after = self._after_failure()
            if not isinstance(exc, Exception):
                raise
            raise self._error(f"{self.lab} up: step '{name}' failed: {exc}{after}") from exc
        self.seconds[name] = round(time.monotonic() - started, 1)

    def _after_failure(self) -> str:
        """The logs copied out, then the lab torn down or kept: what the error line adds about both."""
        dest = logs_dir(self.root)
        where = f"; its logs: {dest}" if export_logs(self.root, dest) else ""
        if self._keep:
            return f"{where}; left up for a look (`grpo-infra {self.lab} down` when done)"
        self._teardown()
        return f"{where}; torn down"
