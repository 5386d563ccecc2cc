"""The in-job fabric gate run for real: a 3-node Ray cluster on this machine, gloo across its nodes.

Each node declares GPUs but has no CUDA, like the local Slurm sandbox: the gate places one rank per
node by its GPU slot and all-reduces CPU tensors. The user relies on two answers: a pool without an
RDMA fabric passes, and a pool that should run on InfiniBand fails when the ranks talk over sockets.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.preflight import busbw_factor
from grpo_infra.preflight.ray_allreduce import main
from tests.conftest import ROOT, unavailable

if importlib.util.find_spec("torch") is None:
    unavailable("torch is not installed (extra `preflight`)")
from ray import cluster_utils

NODES = 3
GPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A real multi-node Ray cluster (one raylet per node), all of it under one fresh temp dir.

    Ray's `cluster_utils.Cluster` writes the head's address to `<default temp root>/ray_current_cluster`
    whatever `temp_dir` says (ray/cluster_utils.py, `write_ray_address(self.head_node.gcs_address)` with no
    temp dir; the default root is `$RAY_TMPDIR/ray`, else /tmp/ray: ray/_common/utils.py,
    `get_default_ray_temp_dir`, Ray 2.60). Pointing RAY_TMPDIR at our own dir keeps that file (and every
    session) in it: the suite needs no /tmp/ray, never touches another Ray's, and `address="auto"` of
    anything else on this machine never finds this cluster. Everything goes, also when setup fails.
    """
    temp_root = tempfile.mkdtemp(prefix="rg-gate-", dir="/tmp")
    cluster: cluster_utils.Cluster | None = None
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
            patch.setenv("RAY_TMPDIR", temp_root)
            node = {"num_cpus": 1, "num_gpus": GPUS_PER_NODE, "temp_dir": os.path.join(temp_root, "ray")}
            cluster = cluster_utils.Cluster()
            cluster.add_node(**node, include_dashboard=False)
            for _ in range(NODES - 1):
                cluster.add_node(**node)
            cluster.wait_for_nodes()
            yield cluster.address
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(temp_root, ignore_errors=True)


def _gate(address: str, tmp_path: Path, *args: str, timeout: float = 90) -> tuple[int, str, dict[str, Any] | None]:
    out = tmp_path / "gate.json"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_infra.preflight.ray_allreduce", "--address", address, "--json-out", str(out),
         "--gpus-per-node", str(GPUS_PER_NODE), "--backend", "gloo", "--size-mib", "4", "--iters", "5",
         "--warmup", "2", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
    )  # fmt: skip
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, report


def test_gloo_across_every_node_passes_a_pool_without_fabric(ray_address: str, tmp_path: Path) -> None:
    code, output, report = _gate(ray_address, tmp_path, "--fabric", "none", "--nodes", str(NODES))
    assert code == 0, output
    assert output.startswith("PASS fabric=none backend=gloo transport=socket ranks=3 nodes=3")
    assert "GB/s" in output
    # A pool without a fabric has no bar to clear, and the line says so in words, not with dashes.
    assert output.splitlines()[0].endswith(" GB/s no threshold")
    assert report is not None and report["passed"]
    # One rank per node, each on a different Ray node: the gang's whole footprint was exercised.
    assert report["ranks"] == NODES
    assert len({p["node_id"] for p in report["placement"]}) == NODES
    # nccl-tests' definitions: algbw = bytes / time, busbw = algbw x 2(n-1)/n.
    assert report["busbw_factor"] == busbw_factor("all_reduce", NODES) == pytest.approx(4 / 3)
    assert report["algbw_gbps"] == pytest.approx(report["size_bytes"] / (report["time_us"] * 1e3), rel=1e-2, abs=0.01)
    # Both figures are reported rounded to 0.01 GB/s, so they agree to within the two roundings.
    assert report["busbw_gbps"] == pytest.approx(
        report["algbw_gbps"] * 4 / 3, rel=1e-2, abs=0.005 + 0.005 * 4 / 3 + 1e-9
    )
    assert report["busbw_gbps"] > 0
    assert set(report["rank_transports"].values()) == {"socket"}


def test_gloo_sockets_fail_a_pool_that_declares_infiniband(ray_address: str, tmp_path: Path) -> None:
    code, output, report = _gate(ray_address, tmp_path, "--fabric", "infiniband", "--nodes", str(NODES))
    assert code == 1, output
    assert output.startswith("FAIL fabric=infiniband backend=gloo transport=socket")
    assert "fail: 3 rank(s) fell back to sockets instead of infiniband" in output
    assert report is not None and not report["passed"]
    # The default for the pool's real GPUs per node, not for the one gloo rank per node.
    assert report["expected_busbw_gbps"] == round(365.84 * 2 / 8, 2)  # the NDR figure for 2 GPUs per node
    assert output.splitlines()[0].endswith(" threshold=73.17 GB/s (expected 91.46 GB/s)")  # 0.8 x 91.46


def test_a_gang_larger_than_the_cluster_fails_within_its_timeout(ray_address: str, tmp_path: Path) -> None:
    started = time.monotonic()
    code, output, _ = _gate(ray_address, tmp_path, "--fabric", "none", "--nodes", str(NODES + 1), "--timeout", "4")
    assert code == 1, output
    assert "Ray could not place 4 node(s) x 2 GPU(s) (STRICT_SPREAD) within 4 s" in output
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "args",
    [
        ["--fabric", "none", "--gpus-per-node", "8", "--nodes", "2", "--fraction", "0"],
        ["--fabric", "none", "--gpus-per-node", "0", "--nodes", "2"],
        ["--fabric", "infiniband", "--gpus-per-node", "8", "--nodes", "2", "--expected-busbw", "-1"],
    ],
)
def test_bad_options_exit_2_before_touching_ray(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err.startswith("error: ")


def _nccl_runs(log: str, ranks: int, seconds: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What 16 NCCL ranks on 2 nodes hand back: their timing and their NCCL_DEBUG=INFO file (here one file)."""
    placement = [
        {"rank": r, "node_id": f"node{r // 8}", "host": f"roce-n{r // 8 + 1}", "pid": 1000 + r, "node_ip": "10.1.0.1"}
        for r in range(ranks)
    ]
    runs = [
        {"rank": r, "seconds": seconds, "check": float(ranks), "nccl_log": log if r == 0 else ""} for r in range(ranks)
    ]
    return placement, runs


@pytest.mark.parametrize(
    ("log_file", "passed", "reason"),
    [
        ("roce_2x8_ok.log", True, None),
        (
            "roce_one_rank_socket.log",
            False,
            "1 rank(s) fell back to sockets instead of roce: rank 11 (roce-n2 pid 42233)",
        ),
    ],
)
def test_nccl_ranks_are_judged_by_the_transport_their_log_shows(
    log_file: str, passed: bool, reason: str | None
) -> None:
    """The NCCL side of the gate (no GPUs here): per-rank transports come from NCCL's own INFO lines."""
    from grpo_infra.preflight.ray_allreduce import GateOptions, _judge_runs

    options = GateOptions(fabric="roce", gpus_per_node=8, nodes=2, backend="nccl", size_mib=1024)
    # 1 GiB in 5.5 ms: algbw 195.2 GB/s, busbw x 2(15)/16 = 366 GB/s, above 0.8 x 365.84 GB/s.
    placement, runs = _nccl_runs((ROOT / "tests/preflight/data" / log_file).read_text(), 16, 5.5e-3)
    result = _judge_runs(options, placement, runs)
    assert result.ranks == 16 and result.nodes_seen == 2
    assert result.busbw_gbps == pytest.approx(2**30 / 5.5e-3 / 1e9 * 30 / 16, abs=0.01)
    assert result.verdict.passed is passed, result.summary()
    assert len(result.rank_transports) == 16
    if reason:
        assert any(reason in r for r in result.verdict.reasons), result.summary()


def test_nccl_ranks_too_slow_for_the_fabric_fail() -> None:
    from grpo_infra.preflight.ray_allreduce import GateOptions, _judge_runs

    options = GateOptions(fabric="roce", gpus_per_node=8, nodes=2, backend="nccl", size_mib=1024)
    placement, runs = _nccl_runs((ROOT / "tests/preflight/data/roce_2x8_ok.log").read_text(), 16, 11e-3)
    result = _judge_runs(options, placement, runs)
    assert not result.verdict.passed
    assert "peak busbw 183.02 GB/s is under 0.8 x 365.84 GB/s = 292.67 GB/s expected of roce" in result.verdict.reasons
