"""The gate times a size on its fabric's bandwidth plateau and expects what a healthy fabric reaches there.

The published curves are real nccl-tests output kept in data/real (index.yaml names each source). A
calibration that times a message below the plateau, or expects more than the published healthy runs
reach, fails a healthy fabric (finding R19): these tests fail when it does.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.preflight import parse_text
from grpo_infra.preflight.calibration import (
    CALIBRATIONS,
    RING_BOUND_FROM_NODES,
    UNCALIBRATED_SIZE_MIB,
    calibration,
    gate_size_mib,
)
from grpo_infra.preflight.gate import gate_settings
from grpo_infra.preflight.verdict import DEFAULT_FRACTION, GATE_FABRICS, default_expected_busbw, judge
from grpo_infra.slurmgen.sbatch import fabric_gate
from grpo_infra.spec import ENVIRONMENT_KEY, Environment, environment_from_config, load_stack
from tests.conftest import ROOT

REAL = Path(__file__).parent / "data" / "real"
MIB = 1 << 20

# Published healthy curves of a calibrated fabric, 2 nodes x 8 H100 (the calibration's own hardware).
CURVES = {
    "tcpxo": "tcpxo_a3mega_2x8_all_reduce.txt",  # a3-megagpu-8g, GPUDirect-TCPXO
    "tcpx": "tcpx_a3high_2x8_all_reduce_kubectl.txt",  # a3-highgpu-8g, GPUDirect-TCPX
}
# A3 machines carry their TCP traffic on one 200 Gbps primary NIC (GKE "GPUDirect-TCPX" how-to): a socket
# fallback cannot pass 25 GB/s, whatever the message size.
A3_PRIMARY_NIC_GBPS = 200 / 8


def _curve(fabric: str) -> dict[int, float]:
    tests = parse_text((REAL / CURVES[fabric]).read_text()).tests
    assert tests is not None
    return {row.size_bytes: row.out_of_place.busbw_gbps for row in tests.rows if row.out_of_place}


def test_every_fabric_a_pool_or_the_cli_can_name_is_calibrated_or_none() -> None:
    assert set(CALIBRATIONS) == set(GATE_FABRICS) - {"none"}
    assert calibration("none") is None and gate_size_mib("none") == UNCALIBRATED_SIZE_MIB


@pytest.mark.parametrize("fabric", sorted(CALIBRATIONS))
def test_every_expectation_names_its_public_source_and_what_it_measured(fabric: str) -> None:
    """Issue 31 item 17: a threshold is only as good as the run behind it, so each one carries the URL of
    that run and the figure read there (an estimate, the URL of the measurement that stands in)."""
    found = CALIBRATIONS[fabric]
    for measurement in (found.two_nodes, *found.multi_node):
        where = f"{fabric} {measurement.nodes} nodes"
        assert "https://" in measurement.source, f"{where}: no URL in {measurement.source!r}"
        if measurement.measured:
            # the figure itself is quoted from the source, with the node count it was measured at
            quoted = [float(n) for n in re.findall(r"(\d+(?:\.\d+)?) GB/s", measurement.source)]
            assert measurement.busbw_gbps in quoted, f"{where}: the figure is not quoted in {measurement.source!r}"
            assert re.search(rf"\b{measurement.nodes} (?:x|nodes)\b", measurement.source), f"{where}: node count"
        else:
            assert measurement.source.startswith("estimate:"), f"{where}: an estimate must say so"
    assert found.two_nodes.nodes == 2
    assert all(m.nodes >= RING_BOUND_FROM_NODES for m in found.multi_node)


@pytest.mark.parametrize("fabric", sorted(CURVES))
def test_the_gate_times_a_size_on_the_published_plateau(fabric: str) -> None:
    curve = _curve(fabric)
    at_gate = curve[gate_size_mib(fabric) * MIB]
    assert at_gate >= 0.95 * max(curve.values()), f"{fabric}: {at_gate} GB/s at the gate's size is below the plateau"


def test_one_gib_is_below_the_tcpxo_plateau_so_its_gate_times_more() -> None:
    curve = _curve("tcpxo")
    assert curve[1024 * MIB] < 0.9 * max(curve.values())  # 297.86 of 338.82 GB/s
    assert gate_size_mib("tcpxo") > 1024


@pytest.mark.parametrize("fabric", sorted(CURVES))
def test_a_healthy_published_run_passes_and_a_socket_fallback_cannot(fabric: str) -> None:
    threshold = default_expected_busbw(fabric, 8, 2) * DEFAULT_FRACTION
    assert _curve(fabric)[gate_size_mib(fabric) * MIB] >= threshold
    assert threshold > A3_PRIMARY_NIC_GBPS


def test_infiniband_reaches_its_plateau_well_below_the_gates_size() -> None:
    """HDR at 4 x 200 Gb/s per 8 GPUs: ~96 GB/s, the maintainer's 24 GB/s per NIC, from ~122 MiB on."""
    tests = parse_text((REAL / "ib_hdr_3x8_a100_step_bytes_tail.txt").read_text()).tests
    assert tests is not None
    sizes = [row.size_bytes for row in tests.rows]
    assert max(sizes) < gate_size_mib("infiniband") * MIB
    per_nic = 4 * 24.0
    assert min(row.out_of_place.busbw_gbps for row in tests.rows if row.out_of_place) >= 0.99 * per_nic


# Published p5.48xlarge all-reduce busbw, GB/s, at 8192 MB and 1024 MB by node count:
# crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv (commit fd167f97), lines 7/10 (2 nodes),
# 16/19 (4), 25/28 (8), 34/37 (16), 43/46 (32).
EFA_P5_AT_8GIB = {2: 477.71, 4: 356.99, 8: 355.36, 16: 356.27, 32: 321.10}
EFA_P5_AT_1GIB = {2: 435.14, 4: 280.30, 8: 274.47, 16: 269.23, 32: 220.08}


@pytest.mark.parametrize("fabric", sorted(CALIBRATIONS))
def test_ring_bound_expectations_stay_under_the_line_rate(fabric: str) -> None:
    """From 3 nodes NCCL's rings put busbw at the NICs' rate; only 2-node trees may report more."""
    found = CALIBRATIONS[fabric]
    for nodes in (3, 4, 8, 16, 32, 64):
        assert default_expected_busbw(fabric, 8, nodes) <= 8 * found.line_rate_gbps_per_gpu
    assert default_expected_busbw(fabric, 4, 4) == pytest.approx(default_expected_busbw(fabric, 8, 4) / 2, abs=0.01)
    assert default_expected_busbw(fabric, 8, 1) is None  # one node: NVLink, not the fabric


@pytest.mark.parametrize("nodes", sorted(EFA_P5_AT_8GIB))
def test_efa_expects_the_published_p5_curve_at_the_size_it_times(nodes: int) -> None:
    assert gate_size_mib("efa") == 8192
    assert default_expected_busbw("efa", 8, nodes) == EFA_P5_AT_8GIB[nodes]
    # a healthy p5 gang at the published figure passes; one at 1 GiB's figure would fail from 4 nodes on
    threshold = EFA_P5_AT_8GIB[nodes] * DEFAULT_FRACTION
    assert EFA_P5_AT_8GIB[nodes] >= threshold
    if nodes >= 4:
        assert EFA_P5_AT_1GIB[nodes] < threshold


def test_two_node_efa_and_ndr_expectations_are_the_published_440_to_490() -> None:
    """The review's finding 17: 2-node H100/H200 all-reduce at >= 1 GiB on p5 EFA and NDR is 440-490 GB/s, and
    the old 300 GB/s estimate let a fabric at 240 GB/s pass."""
    for fabric in ("efa", "infiniband"):
        expected = default_expected_busbw(fabric, 8, 2)
        assert 440 <= expected <= 490
        degraded = judge(fabric=fabric, gpus_per_node=8, nodes=2, peak_busbw_gbps=300.0, rank_transports={"r0": fabric})
        assert not degraded.passed and "is under" in degraded.reasons[0]


def test_an_estimate_is_never_above_a_measurement_of_the_same_fabric() -> None:
    for found in CALIBRATIONS.values():
        measured = [m.busbw_gbps for m in (found.two_nodes, *found.multi_node) if m.measured]
        for estimate in (m for m in (found.two_nodes, *found.multi_node) if not m.measured):
            assert not measured or estimate.busbw_gbps <= max(measured)


def test_roce_estimate_fails_the_published_broken_roce_pair() -> None:
    """NVIDIA/nccl#2409: 2 x 8 H100 on 8 x 400G RoCE at 216.5 GB/s (1 GiB) and 231 (8 GiB), a NCCL-side limit."""
    threshold = default_expected_busbw("roce", 8, 2) * DEFAULT_FRACTION
    assert threshold > 231.0


def test_tcpx_passes_both_published_healthy_runs_and_fails_its_socket_run() -> None:
    """skypilot-org/skypilot examples/gcp_gpu_direct_tcpx/README.md: 66.2 GB/s at 1 GB with TCPX, 20.09 without;
    GoogleCloudPlatform's A3 sample: 86.99 at 1 GiB. The lower healthy run is the expectation."""
    threshold = default_expected_busbw("tcpx", 8, 2) * DEFAULT_FRACTION
    assert threshold <= 66.2 and threshold <= 86.99
    assert threshold > 20.09


def test_tcpxo_two_node_run_passes_its_gate_end_to_end() -> None:
    report = parse_text((REAL / CURVES["tcpxo"]).read_text())
    verdict = judge(
        fabric="tcpxo",
        gpus_per_node=8,
        nodes=2,
        peak_busbw_gbps=_curve("tcpxo")[gate_size_mib("tcpxo") * MIB],
        rank_transports={f"rank {r}": "tcpxo" for r in range(16)},
        ranks_seen=report.ranks,
        hosts_seen=len(report.hosts),
    )
    assert verdict.passed, verdict.reasons


def _config(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def _with_gate(stack: str, nccl: dict[str, Any]) -> Environment:
    config = copy.deepcopy(_config(stack))
    config[ENVIRONMENT_KEY]["job"]["preflight"] = {"nccl": nccl}
    return environment_from_config(
        config, {k for k, v in config.items() if isinstance(v, dict) and "secure" in v}, stack
    )


@pytest.mark.parametrize(
    ("stack", "fabric", "size_mib", "expected"),
    [
        ("eks-prod", "efa", 8192, 356.99),
        ("onprem-k8s", "roce", 1024, 365.84),
        ("onprem-slurm", "infiniband", 1024, 365.84),
        ("gke-dev", "none", 1024, None),
    ],
)
def test_rendered_gate_options_follow_the_stacks_fabric(
    stack: str, fabric: str, size_mib: int, expected: float | None
) -> None:
    settings = gate_settings(load_stack(stack, ROOT).environment)
    assert (settings.fabric, settings.size_mib, settings.expected_busbw_gbps) == (fabric, size_mib, expected)
    argv = settings.argv()
    assert argv[argv.index("--size-mib") + 1] == str(size_mib)


def test_the_slurm_all_reduce_perf_times_the_calibrated_size() -> None:
    env = load_stack("onprem-slurm", ROOT).environment
    perf = fabric_gate(env).all_reduce_perf
    size = f"{gate_settings(env).size_mib}M"
    assert perf[perf.index("-b") + 1] == size and perf[perf.index("-e") + 1] == size


def test_a_stated_size_wins_over_the_calibration() -> None:
    settings = gate_settings(_with_gate("eks-prod", {"sizeMib": 2048}))
    assert settings.size_mib == 2048
    assert "--size-mib 2048" in shlex.join(settings.argv())
