"""The resume rule, one program for every path: a checkpoint directory belongs to one experiment, and a
resumed run must advance.

1. Identity. verl 0.9.1 resumes from whatever `latest_checkpointed_iteration.txt` names in
   `trainer.default_local_dir` (`resume_mode: auto`; verl/trainer/ppo/ray_trainer.py:1052-1083,
   verl/utils/checkpoint/checkpoint_manager.py:222-259 `find_latest_ckpt_path`): it cannot tell its own
   checkpoints from another experiment's that reused the job name (and so the directory). The first run
   writes the experiment's identity (`IDENTITY_FILE`, rendered by `grpo_infra.training.experiment_identity`)
   beside the checkpoints; a later run of another experiment is refused in one line naming what differs,
   before verl starts. A directory holding checkpoints but no identity is refused too: whose they are is
   unknown.
2. Advance. verl has shipped bugs where a run resumed at an epoch boundary exited 0 without training; a
   requeued or retried job would then be reported COMPLETED/SUCCEEDED having trained nothing. The tracker
   is read before and after the command; exit 0 after resuming at step N > 0 with no step after N is
   turned into 1, said in one line. A fresh run (no checkpoint at start) is never judged.
3. Finished. A run that exits 0 having trained (fresh, or advanced past its start) records the step it
   ended at (`FINISHED_FILE`). A later run of the same experiment that resumes at exactly that step has
   nothing left to train, and its exit 0 is kept: a retry after training finished (a RayJob attempt failed
   by its submitter after the driver ended, a Slurm requeue after the last step) then succeeds instead of
   failing every retry. A checkpoint whose run never exited 0 (it died after saving) is still judged,
   unless it is the experiment's last step (`last_step` in the identity, when the stack fixes it: the
   probe's steps, verl's `trainer.total_training_steps`): a run evicted between its last save and its exit
   finished the experiment, and the next run, resuming there, has nothing left to train.

    python3 resume.py --checkpoint-dir DIR --identity-file FILE -- COMMAND...   (both rules around COMMAND)
    python3 resume.py --checkpoint-dir DIR --identity JSON                      (the identity rule alone)
    python3 resume.py --checkpoint-dir DIR --judge STEP   (the advance and finished rules, for a command the
                                                           caller ran itself from STEP and that exited 0)

Standard library only and self-contained (no package imports): the Kubernetes head runs this file from a
ConfigMap whatever the image holds (grpo_infra/k8s/shipped.py), the sbatch and the launchers' nodes run its
text with `python3 -c` (the lifecycle library embeds it), and `python3 -m grpo_infra.lifecycle.resume` works
where grpo-infra is installed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

# verl's checkpoint tracker: the last saved step (verl/trainer/ppo/ray_trainer.py:1046-1050, 0.9.1).
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
# The experiment a checkpoint directory belongs to, written beside verl's tracker.
IDENTITY_FILE = ".grpo-infra-experiment.json"
# The step a run of this experiment ended at with exit 0, written beside verl's tracker.
FINISHED_FILE = ".grpo-infra-finished-step"
# What to do about a refusal, said in the refusal line.
REMEDY = "set a new job.name for a new experiment, or remove the directory to start this one over"
# Differing fields named in the refusal line, at most.
SHOWN_DIFFERENCES = 3

MODULE = "grpo_infra.lifecycle.resume"


def _step_in(path: Path) -> int | None:
    """The step number a one-line file holds, or None (no file, or not a number)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def checkpoint_step(directory: Path) -> int:
    """The last saved step in verl's layout under `directory`; 0 when there is none."""
    return _step_in(directory / CHECKPOINT_TRACKER) or 0


def finished_step(directory: Path) -> int | None:
    """The step an earlier run of this experiment exited 0 at, or None."""
    return _step_in(directory / FINISHED_FILE)


def record_finished(directory: Path, step: int) -> None:
    """Record that a run ended at `step` with exit 0 (atomically: a reader sees the old or the new step)."""
    partial = directory / f"{FINISHED_FILE}.partial"
    partial.write_text(f"{step}\n", encoding="utf-8")
    partial.replace(directory / FINISHED_FILE)


def verdict(
    before: int, after: int, status: int, finished: int | None = None, last: int | None = None
) -> tuple[int, str | None]:
    """The run's exit status and the line saying why, from the steps before and after, the command's status,
    the step an earlier run of the experiment finished at, and the experiment's last step when known."""
    if status != 0 or before == 0 or after > before:
        return status, None  # a failure stays the command's own; a fresh or advanced run is not judged
    if finished == before:
        return 0, f"grpo: the experiment finished at step {before} in an earlier run; nothing was left to train"
    if last is not None and before >= last:
        # An earlier run saved the last step but was stopped before it exited (an eviction, a lost node).
        return 0, f"grpo: an earlier run saved the experiment's last step ({last}); nothing was left to train"
    return 1, (
        f"grpo: ERROR: the run resumed at step {before} and exited 0 without saving a newer step "
        f"(now {after}): it did not train"
    )


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`field: recorded → current` for each field of the experiment that differs, in sorted order."""
    old, new = recorded.get("fields", {}), current.get("fields", {})
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {json.dumps(old.get(key, '(absent)'))} → {json.dumps(new.get(key, '(absent)'))}")
    return out


def identity_refusal(directory: Path, identity: dict[str, Any]) -> str | None:
    """None when `directory` may hold this experiment's checkpoints (recording it when new), else the one line."""
    record = directory / IDENTITY_FILE
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError) as error:
        return f"grpo: ERROR: checkpoint dir {directory}: cannot read {IDENTITY_FILE} ({error}); {REMEDY}"
    if recorded is None:
        step = checkpoint_step(directory)
        if step > 0:
            return (
                f"grpo: ERROR: checkpoint dir {directory} holds checkpoints (step {step}) of an unknown "
                f"experiment (no {IDENTITY_FILE}); {REMEDY}"
            )
        directory.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f"{IDENTITY_FILE}.partial")
        partial.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(record)
        return None
    if recorded.get("digest") == identity.get("digest"):
        return None
    changed = differences(recorded, identity)
    shown = "; ".join(changed[:SHOWN_DIFFERENCES]) + (
        f"; {len(changed) - SHOWN_DIFFERENCES} more" if len(changed) > SHOWN_DIFFERENCES else ""
    )
    return (
        f"grpo: ERROR: checkpoint dir {directory} belongs to experiment {recorded.get('digest')} "
        f"(job {recorded.get('job')}), not this run's {identity.get('digest')} ({shown or 'another digest'}); {REMEDY}"
    )


def guarded(
    checkpoint_dir: str,
    command: str,
    *,
    identity_file: str | None = None,
    identity: str | None = None,
    program: str = f"-m {MODULE}",
) -> str:
    """`command` (a shell command line) run under both rules, as a shell command line; the experiment's
    identity from a file or inline JSON (exactly one)."""
    assert (identity_file is None) != (identity is None), "one of identity_file and identity"
    source = (
        f"--identity-file {shlex.quote(identity_file)}"
        if identity_file
        else f"--identity {shlex.quote(identity or '')}"
    )
    return f"python3 {program} --checkpoint-dir {shlex.quote(checkpoint_dir)} {source} -- {command}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="verl's trainer.default_local_dir")
    identity = parser.add_mutually_exclusive_group(required=True)
    identity.add_argument("--identity", help="the experiment's identity, JSON")
    identity.add_argument("--identity-file", type=Path, help="a file holding the experiment's identity, JSON")
    identity.add_argument(
        "--judge", type=int, metavar="STEP", help="judge a command that started at STEP and exited 0 (the sbatch's)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    args = parser.parse_args(argv)
    if args.judge is not None:
        return judged(args.checkpoint_dir, args.judge, 0, recorded_last_step(args.checkpoint_dir))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    text = args.identity if args.identity is not None else args.identity_file.read_text(encoding="utf-8")
    identity = json.loads(text)
    refusal = identity_refusal(args.checkpoint_dir, identity)
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return 2
    if not command:
        return 0
    before = checkpoint_step(args.checkpoint_dir)
    child = subprocess.Popen(command)
    # A stop of the job (KubeRay deletes the cluster, Ray stops the driver) reaches the trainer.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    return judged(args.checkpoint_dir, before, child.wait(), identity.get("last_step"))


def recorded_last_step(directory: Path) -> int | None:
    """The last step the experiment's recorded identity names (the sbatch's `--judge` has no identity of its own)."""
    try:
        value = json.loads((directory / IDENTITY_FILE).read_text(encoding="utf-8")).get("last_step")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def judged(directory: Path, before: int, status: int, last: int | None = None) -> int:
    """The exit status of a run that started at step `before` and ended with `status`, its line said, and a
    run that trained and exited 0 recorded as finished."""
    after = checkpoint_step(directory)
    code, line = verdict(before, after, status, finished_step(directory), last)
    if line:
        print(line, file=sys.stderr, flush=True)
    if code == 0 and after > before:
        record_finished(directory, after)
    return code


if __name__ == "__main__":
    sys.exit(main())
