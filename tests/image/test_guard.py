"""The runtime guard, run for real against this machine's Python environment (Ray 2.60.0, verl 0.9.1,
torch, no vLLM, no EFA): what it prints and when it stops a job."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from grpo_infra.image import guard_program

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# What this environment really holds, written down independently of the guard.
RAY, VERL = "2.60.0", "0.9.1"


def torch_cuda() -> str | None:
    """torch's own answer (the guard reads a file instead of importing torch)."""
    import torch

    return torch.version.cuda


def run(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURMD_NODENAME": "node1"}
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-c", guard_program(), *args], capture_output=True, text=True, env=env, timeout=60
    )


def fail_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stdout.splitlines() if " FAIL " in line]


def test_the_environment_is_what_these_tests_assume() -> None:
    assert (version("ray"), version("verl")) == (RAY, VERL)


def test_a_matching_declaration_passes_and_prints_what_is_present() -> None:
    proc = run("--python", PYTHON, "--ray", RAY, "--verl", VERL, "--grpo-infra")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, last = proc.stdout.splitlines()[0], proc.stdout.splitlines()[-1]
    assert first.startswith(f"image guard [node1]: python {sys.version.split()[0]}, ray {RAY}, verl {VERL}, ")
    assert f"torch {version('torch')} (CUDA {torch_cuda() or 'none'})" in first and "EFA none" in first
    assert last == "image guard [node1]: PASS the image matches the stack's declaration"


def test_another_ray_fails_with_one_line() -> None:
    proc = run("--python", PYTHON, "--ray", "2.47.1", "--verl", VERL)
    assert proc.returncode == 1
    assert fail_lines(proc) == [f"image guard [node1]: FAIL ray 2.47.1 declared, {RAY} in the image"]


def test_every_difference_is_named_in_the_one_line() -> None:
    proc = run(
        "--python", "3.12", "--ray", RAY, "--verl", "0.7.0", "--engine", "vllm==0.24.0", "--cuda", "11.8", "--efa"
    )
    assert proc.returncode == 1
    (line,) = fail_lines(proc)
    assert line == (
        f"image guard [node1]: FAIL python 3.12 declared, {PYTHON} in the image; verl 0.7.0 declared, {VERL} in the "
        f"image; vllm 0.24.0 declared, none in the image; CUDA 11.8 declared, torch built for {torch_cuda() or 'no CUDA'}; "
        "EFA userspace declared, no libfabric EFA provider with aws-ofi-nccl in /opt/amazon"
    )


def test_engine_is_not_checked_when_another_entrypoint_replaces_verl() -> None:
    proc = run("--python", PYTHON, "--ray", RAY, "--engine", "vllm==0.24.0", "--skip-engine")
    assert proc.returncode == 0, proc.stdout
    assert "vllm absent" in proc.stdout


def test_nccl_tests_must_be_on_path(tmp_path: Path) -> None:
    missing = run("--python", PYTHON, "--ray", RAY, "--nccl-tests", "all_reduce_perf", path=str(tmp_path))
    assert fail_lines(missing) == [
        "image guard [node1]: FAIL nccl-tests needed by the fabric gate, all_reduce_perf not found"
    ]
    binary = tmp_path / "all_reduce_perf"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    found = run("--python", PYTHON, "--ray", RAY, "--nccl-tests", "all_reduce_perf", path=str(tmp_path))
    assert found.returncode == 0 and f"nccl-tests {binary}" in found.stdout


def test_the_guard_needs_only_the_standard_library(tmp_path: Path) -> None:
    """`python3 -I` ignores the environment's site-packages hooks; the guard still runs (and finds no Ray)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", guard_program(), "--python", PYTHON, "--ray", RAY],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL ray 2.60.0 declared, none in the image" in proc.stdout


def test_a_host_driver_older_than_the_images_cuda_needs_stops_the_job(tmp_path: Path) -> None:
    """CUDA 13.0 needs >= 580.65.06 (NVIDIA's CUDA 13.0 release notes, Table 3); the guard reads the node's."""
    old = tmp_path / "version"
    old.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16)\n"
    )
    base = ["--python", PYTHON, "--ray", RAY, "--min-driver", "580.65.06", "--driver-version-file", str(old)]
    proc = run(*base)
    assert proc.returncode == 1
    assert fail_lines(proc)[-1].endswith(
        "FAIL NVIDIA driver 570.133.20 on this node, the declared image's CUDA needs >= 580.65.06"
    )
    new = tmp_path / "new"
    new.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Wed Aug 27 2025\n")
    assert (
        run("--python", PYTHON, "--ray", RAY, "--min-driver", "580.65.06", "--driver-version-file", str(new)).returncode
        == 0
    )
    # No driver at all (this machine): one line; at build time the driver is not looked for.
    missing = run(
        "--python", PYTHON, "--ray", RAY, "--min-driver", "580.65.06", "--driver-version-file", str(tmp_path / "x")
    )
    assert "FAIL no NVIDIA driver" in fail_lines(missing)[-1]
    assert run("--python", PYTHON, "--ray", RAY, "--min-driver", "580.65.06", "--at-build").returncode == 0


def test_a_missing_attention_package_stops_the_job_in_one_line() -> None:
    proc = run("--python", PYTHON, "--ray", RAY, "--attention", "flash_attention_2")
    assert proc.returncode == 1
    (line,) = fail_lines(proc)
    assert "attention flash_attention_2 declared, flash_attn does not import (ModuleNotFoundError" in line
    assert run("--python", PYTHON, "--ray", RAY, "--attention", "sdpa").returncode == 0


def test_a_fabric_pool_without_a_loading_verbs_provider_stops_the_job() -> None:
    """On this machine there is no HCA (and libibverbs may be absent): a pool declaring HCAs fails."""
    import ctypes

    proc = run("--python", PYTHON, "--ray", RAY, "--rdma", "--hca", "mlx5_0", "--hca", "mlx5_1")
    assert proc.returncode == 1
    (line,) = fail_lines(proc)
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        assert "the pool's fabric needs RDMA verbs, libibverbs.so.1 does not load" in line
    else:
        providers = list(Path("/usr/lib/x86_64-linux-gnu/libibverbs").glob("lib*-rdmav*.so"))
        expected = "no verbs device loads here" if providers else "no provider in"
        assert expected in line, line
