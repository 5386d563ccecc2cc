"""Submit jobs to the sandbox with the plain Slurm commands and read what they did.

Shared by the end-to-end tests, the benchmark and the demo: `sbatch` of the rendered script with
the probe as entrypoint, job state from `scontrol`, and the probe's `PROBE {json}` lines from the
job's output file.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import probe_report
from .cluster import slurm_env
from .plan import ROOT, SandboxError

# Job states after which a job never runs again (a requeued job passes through PENDING instead).
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)


def probe_command(
    checkpoint_dir: Path | str, *, steps: int = 3, step_seconds: float = 0.0, roles: Sequence[str] = ()
) -> str:
    """The probe as a job entrypoint, run by this interpreter (the one with Ray and grpo_infra); `roles` are a
    disaggregated job's `--role=...` arguments (grpo_infra/training.py `probe_roles`)."""
    return shlex.join(
        [
            sys.executable,
            "-m",
            "grpo_infra.probe",
            *roles,
            "--checkpoint-dir",
            str(checkpoint_dir),
            "--steps",
            str(steps),
            "--step-seconds",
            str(step_seconds),
        ]
    )


def job_environment(extra: Mapping[str, str] | None = None, *, root: Path = ROOT) -> dict[str, str]:
    """What a user's shell has after `eval "$(grpo-infra sandbox env)"`, plus `extra` (e.g. GRPO_ENTRYPOINT)."""
    env = slurm_env(root)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.update(extra or {})
    return env


def submit(
    script: Path,
    *,
    extra_env: Mapping[str, str] | None = None,
    args: Iterable[str] = (),
    cwd: Path | None = None,
    root: Path = ROOT,
) -> int:
    """`sbatch` the script as a user would; returns the job id."""
    proc = subprocess.run(
        ["sbatch", "--parsable", *args, str(script)],
        env=job_environment(extra_env, root=root),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0:
        raise SandboxError(f"sbatch refused {script}: {proc.stderr.strip()}")
    return int(proc.stdout.strip().split(";")[0])


def job_info(job_id: int, *, root: Path = ROOT) -> dict[str, str]:
    """`scontrol show job` as a dict (JobState, NodeList, StdOut, Restarts, ...)."""
    proc = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)],
        env=slurm_env(root),
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    fields: dict[str, str] = {}
    for match in re.finditer(r"(\w+)=(\S*)", proc.stdout):
        fields.setdefault(match[1], match[2])
    return fields


def job_state(job_id: int, *, root: Path = ROOT) -> str:
    return job_info(job_id, root=root).get("JobState", "UNKNOWN")


def wait_for_state(
    job_id: int, states: Iterable[str] = FINAL_STATES, *, timeout: float, root: Path = ROOT, poll: float = 0.2
) -> str:
    """Poll until the job reaches one of `states`; raises with the last state at the timeout."""
    wanted = set(states)
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        state = job_state(job_id, root=root)
        if state in wanted:
            return state
        time.sleep(poll)
    raise SandboxError(f"job {job_id} still {state} after {timeout:.0f}s (waited for {sorted(wanted)})")


def wait_for_checkpoint(job_id: int, tracker: Path, *, step: int = 1, timeout: float = 180, root: Path = ROOT) -> None:
    """Until the job's checkpoint tracker says `step` or later (the run is training).
    Raises with the end of the job's output if the job ends first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while not (tracker.is_file() and int(tracker.read_text() or 0) >= step):
        if job_state(job_id, root=root) in FINAL_STATES or time.monotonic() > deadline:
            raise SandboxError(
                f"job {job_id} saved no step {step} in {timeout:.0f}s:\n{output(job_id, root=root)[-3000:]}"
            )
        time.sleep(0.2)


def output(job_id: int, *, root: Path = ROOT) -> str:
    """The job's output file (stdout and stderr, as the rendered script writes them)."""
    info = job_info(job_id, root=root)
    texts = []
    for key in ("StdOut", "StdErr"):
        path = Path(info.get(key, ""))
        if path.is_file() and (key == "StdOut" or info.get("StdErr") != info.get("StdOut")):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "".join(texts)


def probe_events(text: str) -> list[dict[str, Any]]:
    """The probe's events in a job's output, in order."""
    return probe_report.events(text)


def ray_processes(namespaces: Iterable[str], marker: str = "ray") -> dict[str, list[str]]:
    """Command lines of Ray processes (those mentioning `marker`) per sandbox namespace."""
    from .cluster import namespace_pids

    found: dict[str, list[str]] = {}
    for ns in namespaces:
        for pid in namespace_pids(ns):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and ("ray" in cmd or "raylet" in cmd or "gcs_server" in cmd):
                found.setdefault(ns, []).append(cmd.strip())
    return found


def holders_of(directory: Path) -> dict[int, str]:
    """Every process with a file open under `directory` or running from it: pid -> its command line.

    The sandbox's nodes share this machine's process table, so this covers every node at once. It is what
    cannot miss a job's Ray: each Ray process, the agents that retitle themselves included, logs under its
    node's temp dir.
    """
    prefix = f"{directory.resolve()}/"
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = [os.readlink(proc / "cwd"), *(os.readlink(fd) for fd in (proc / "fd").iterdir())]
            if any(f"{link}/".startswith(prefix) for link in links):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
    return found
