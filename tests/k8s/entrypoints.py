"""Reading a rendered RayJob entrypoint: the one place tests strip the shell wrapper and the resume guard."""

from __future__ import annotations

import shlex

from grpo_infra.k8s.shipped import RESUME_FILE, RESUME_MOUNT


def training_step(entrypoint: str) -> str:
    """The last step of `sh -c '<steps> && <training>'` (the whole line without a wrapper)."""
    argv = shlex.split(entrypoint)
    if argv[:2] == ["sh", "-c"]:
        return argv[2].rsplit(" && ", 1)[-1]
    return entrypoint


def unguarded(training: str) -> str:
    """verl's command line with the resume rule (run from the head's shipped ConfigMap) taken off."""
    argv = shlex.split(training)
    if argv[:2] == ["python3", f"{RESUME_MOUNT}/{RESUME_FILE}"]:
        return shlex.join(argv[argv.index("--") + 1 :])
    return training


def verl_argv(entrypoint: str) -> list[str]:
    """verl's argv inside the entrypoint."""
    return shlex.split(unguarded(training_step(entrypoint)))
