"""The gate times a size on its fabric's bandwidth plateau and expects what a healthy fabric reaches there.

The published curves are real nccl-tests output kept in data/real (index.yaml names each source). A
calibration that times a message below the plateau, or expects more than the published healthy runs
reach, fails a healthy fabric (finding R19): these tests fail when it does.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.preflight import parse_text
from grpo_infra.preflight.calibration import CALIBRATIONS, UNCALIBRATED_SIZE_MIB, calibration, gate_size_mib
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


@pytest.mark.parametrize(
    ("fabric", "per_gpu_line_rate"),
    [("infiniband", 50.0), ("roce", 50.0), ("efa", 50.0), ("tcpx", 12.5), ("tcpxo", 25.0)],
)
def test_expected_busbw_stays_under_the_line_rate_it_is_derived_from(fabric: str, per_gpu_line_rate: float) -> None:
    # 400 Gb/s per GPU (NDR, 400 GbE, p5's 3200 Gbps / 8), A3 High 4 x 200 Gbps / 8, A3 Mega 8 x 200 Gbps / 8
    found = CALIBRATIONS[fabric]
    assert found.line_rate_gbps_per_gpu == per_gpu_line_rate
    assert 0.5 < found.efficiency < 1.0
    assert default_expected_busbw(fabric, 8, 4) == pytest.approx(8 * per_gpu_line_rate * found.efficiency, abs=0.05)
    assert default_expected_busbw(fabric, 4, 4) == pytest.approx(default_expected_busbw(fabric, 8, 4) / 2, abs=0.1)
    assert default_expected_busbw(fabric, 8, 1) is None  # one node: NVLink, not the fabric


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
        ("eks-prod", "efa", 8192, 300.0),
        ("onprem-k8s", "roce", 1024, 340.0),
        ("onprem-slurm", "infiniband", 1024, 360.0),
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
