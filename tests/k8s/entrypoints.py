"""Reading a rendered RayJob entrypoint: the one place tests strip the shell wrapper and the resume guard."""

from __future__ import annotations

import shlex

from grpo_infra.k8s.rayjob import UNGUARDED_WARNING
from grpo_infra.lifecycle.resume import MODULE


def training_step(entrypoint: str) -> str:
    """The last step of `sh -c '<steps> && <training>'` (the whole line without a wrapper)."""
    argv = shlex.split(entrypoint)
    if argv[:2] == ["sh", "-c"]:
        return argv[2].rsplit(" && ", 1)[-1]
    return entrypoint


def unguarded(training: str) -> str:
    """verl's command line with the resume guard (or its one-line warning) taken off."""
    argv = shlex.split(training)
    if argv[:3] == ["python3", "-m", MODULE]:
        return shlex.join(argv[argv.index("--") + 1 :])
    warning = f"{{ echo {shlex.quote(UNGUARDED_WARNING)} >&2; "
    if training.startswith(warning) and training.endswith("; }"):
        return training[len(warning) : -len("; }")]
    return training


def verl_argv(entrypoint: str) -> list[str]:
    """verl's argv inside the entrypoint."""
    return shlex.split(unguarded(training_step(entrypoint)))
