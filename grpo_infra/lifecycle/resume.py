"""A resumed run must advance: run the training command, and fail a run that resumed from a checkpoint
and exited 0 without saving a newer step.

verl has shipped such bugs (a run resumed at an epoch boundary and exited 0 without training); a requeued
or retried job would then be reported COMPLETED/SUCCEEDED having trained nothing. The rule compares verl's
checkpoint tracker (`latest_checkpointed_iteration.txt`, the CHECKPOINT_TRACKER the sbatch's
`checkpoint_step` reads too) before and after the command:

    python3 -m grpo_infra.lifecycle.resume --checkpoint-dir DIR -- COMMAND...

Exit status: the command's, except 1 when it exited 0 after resuming at step N > 0 with no step after N,
said in one line. A fresh run (no checkpoint at start) is never judged. Standard library only: it runs in
the image, as the RayJob's entrypoint (grpo_infra/k8s/rayjob.py) calls it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from . import CHECKPOINT_TRACKER

MODULE = "grpo_infra.lifecycle.resume"


def checkpoint_step(directory: Path) -> int:
    """The last saved step in verl's layout under `directory`; 0 when there is none."""
    try:
        text = (directory / CHECKPOINT_TRACKER).read_text(encoding="utf-8").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def verdict(before: int, after: int, status: int) -> tuple[int, str | None]:
    """The run's exit status and the line saying why, from the steps before and after and the command's status."""
    if status == 0 and before > 0 and after <= before:
        return 1, (
            f"grpo: ERROR: the run resumed at step {before} and exited 0 without saving a newer step "
            f"(now {after}): it did not train"
        )
    return status, None


def guarded(checkpoint_dir: str, command: str) -> str:
    """`command` (a shell command line) run under this check, as a shell command line."""
    return f"python3 -m {MODULE} --checkpoint-dir {shlex.quote(checkpoint_dir)} -- {command}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="verl's trainer.default_local_dir")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    before = checkpoint_step(args.checkpoint_dir)
    child = subprocess.Popen(command)
    # A stop of the job (KubeRay deletes the cluster, Ray stops the driver) reaches the trainer.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    status = child.wait()
    code, line = verdict(before, checkpoint_step(args.checkpoint_dir), status)
    if line:
        print(line, file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
