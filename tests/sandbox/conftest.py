"""Fixtures of the end-to-end sandbox tests: a real Slurm cluster per module, torn down after it.

Tests marked `sandbox` need root (skipped otherwise) and the Slurm packages: when root and they
are missing, the tests FAIL, because CI installs them (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_infra import sandbox
from grpo_infra.sandbox.plan import Plan
from grpo_infra.spec import Environment, load_stack

ROOT = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/grpo-sandbox.lock")


def require_sandbox() -> None:
    """Skip without root; fail (not skip) when root lacks the packages."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm sandbox needs root (network namespaces, daemons as root)")
    missing = sandbox.missing_packages()
    if missing:
        pytest.fail(f"Slurm sandbox packages missing: {' '.join(missing)}; run scripts/install-system-deps.sh")


def local_slurm() -> Environment:
    return load_stack("local-slurm", ROOT).environment


def bring_up(env: Environment, nodes: int = 3, stack: str = "local-slurm") -> Iterator[Plan]:
    """The sandbox for `env`, held alone on this machine (one sandbox per machine: its namespaces,
    addresses and /run/grpo-sandbox are fixed) until the module is done; another holder of the lock,
    such as a benchmark, is waited for, never torn down."""
    require_sandbox()
    LOCK.touch(exist_ok=True)
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        plan = sandbox.up(stack, env, nodes)
        try:
            yield plan
        finally:
            sandbox.down()


@pytest.fixture(scope="module")
def local_sandbox() -> Iterator[Plan]:
    """The local-slurm stack's sandbox: 3 nodes × 8 placeholder GPUs, its rendered files."""
    yield from bring_up(local_slurm())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where a test submits from (the rendered script writes %x-%j.out here)."""
    return tmp_path
