"""The project's modules that run inside the job's image import without the project's dependencies.

An image holds grpo-infra without its dependencies (`--no-deps`: the production build's wheel, the CPU
variant's copy), so whatever a pod runs as `python3 -m grpo_infra...` must import with the standard
library alone (Ray only once it runs): the resume rule the RayJob's entrypoint wraps training in, the
probe `job.probe` runs, the gloo fabric gate. `python -S` leaves site-packages out, as such an image does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

IN_IMAGE = ["grpo_infra.lifecycle.resume", "grpo_infra.probe", "grpo_infra.preflight.ray_allreduce"]


@pytest.mark.parametrize("module", IN_IMAGE)
def test_a_module_the_pods_run_imports_with_the_standard_library_alone(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]


def test_the_probe_and_the_resume_rule_answer_their_help_without_ray() -> None:
    for module in ("grpo_infra.probe", "grpo_infra.lifecycle.resume"):
        done = subprocess.run(
            [sys.executable, "-S", "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
