"""Vendor network plugins are told apart by the names they give NCCL, and launcher prefixes are peeled off.

The lines follow the forms each source documents (cited per test); the real samples that hold such lines
verbatim are in data/real and test_real_samples.py.
"""

from __future__ import annotations

import pytest

from grpo_infra.preflight import parse_nccl_log, parse_text
from grpo_infra.preflight._lines import clean_line
from grpo_infra.preflight.verdict import fabric_verdict, transport_reasons

NCCL_LINE = "gpu-a:4052:4122 [0] NCCL INFO Using network IB"


@pytest.mark.parametrize(
    "wrapped",
    [
        "[1,0]<stdout>:" + NCCL_LINE,  # mpirun --tag-output
        "        [1,3]<stderr>:" + NCCL_LINE,  # the same, indented by a quote
        " 0: " + NCCL_LINE,  # srun --label
        "gpu-a: " + NCCL_LINE,  # pdsh
        "[default0]:" + NCCL_LINE,  # torchrun --tee
        "[rank3]: " + NCCL_LINE,
        "[0] " + NCCL_LINE,
        "(RayWorkerWrapper pid=1000) " + NCCL_LINE,  # Ray's worker prefix (NVIDIA/nccl#1591)
        "(RayWorkerWrapper pid=1019, ip=10.0.0.2) " + NCCL_LINE,
        "[pod/ray-worker-0/ray-worker] " + NCCL_LINE,  # kubectl logs --prefix
        "2026-12-01T23:10:04.123456789Z " + NCCL_LINE,  # kubectl logs --timestamps
        "2025-05-16T16:39:51.208-07:00" + NCCL_LINE,  # CloudWatch, glued
        "  | 2025-05-16T16:39:51.208-07:00 | " + NCCL_LINE + " | " + NCCL_LINE,  # CloudWatch export
        "\x1b[32m" + NCCL_LINE + "\x1b[0m",  # colours
        "> " + NCCL_LINE + "   \r",  # Markdown quote, CR, trailing blanks
        "[pod/ray-worker-0/ray-worker] 2026-12-01T23:10:04Z [1,0]<stdout>:" + NCCL_LINE,  # stacked
    ],
)
def test_launcher_and_collector_prefixes_are_removed(wrapped: str) -> None:
    assert clean_line(wrapped) == NCCL_LINE


def test_table_rows_keep_their_leading_blanks_meaningless_but_their_numbers_intact() -> None:
    row = "     1048576        262144     float     sum      -1   1788.7    0.59    1.10    N/A   1725.9    0.61    1.14    N/A"
    assert clean_line(" 0: " + row).split() == row.split()


def _transport(*lines: str) -> str | None:
    report = parse_nccl_log("\n".join(lines))
    assert report is not None
    return report.transport


def test_google_gib_is_roce() -> None:
    # Google Cloud's NCCL/gIB troubleshooting page: "Using network gIB", "NET/gIB : Initializing gIB v1.0.2",
    # with the `[ 6 ]` device field it prints.
    assert _transport("a3ultra-vm-0:606:642 [ 6 ] NCCL INFO Using network gIB") == "roce"
    assert _transport("a3ultra-vm-0:606:642 [ 6 ] NCCL INFO NET/gIB : Initializing gIB v1.0.2") == "roce"


def test_gpudirect_tcpx_with_and_without_its_api_suffix() -> None:
    # google/nccl-plugin-gpudirecttcpx src/config.h.in: PRODUCT_NAME "GPUDirectTCPX"; v7 builds print `_v7`.
    assert _transport("a3-0:91:120 [0] NCCL INFO Using network GPUDirectTCPX_v7") == "tcpx"
    assert _transport("a3-0:91:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/GPUDirectTCPX/0") == "tcpx"


def test_fastrak_is_tcpxo() -> None:
    assert _transport("a3m-0:77:90 [0] NCCL INFO Using network FasTrak") == "tcpxo"
    assert _transport("a3m-0:77:90 [0] NCCL INFO NET/FasTrak plugin initialized") == "tcpxo"


def test_hpcx_ibext_plugin_takes_its_link_layer_from_the_host() -> None:
    # NVIDIA/nccl#1016: only some processes print the device line; the host's HCAs are the same for all.
    assert (
        _transport(
            "w2:426:533 [0] NCCL INFO NET/IB : Using [0]rocep204s0f0v6:1/RoCE [RO]; OOB net1:192.168.102.12<0>",
            "w2:431:535 [5] NCCL INFO P2P plugin IBext",
        )
        == "roce"
    )


def test_verbs_without_a_device_line_is_ambiguous_and_fails_both_ib_and_roce() -> None:
    report = parse_text("n1:10:10 [0] NCCL INFO Using network IB\nn2:20:20 [0] NCCL INFO Using network IBext_v8")
    assert report.transport == "ib"
    for fabric in ("infiniband", "roce"):
        verdict = fabric_verdict([report], fabric, 1, 2)
        assert not verdict.passed
        assert any("cannot be told apart" in reason for reason in verdict.reasons), verdict.reasons


@pytest.mark.parametrize(
    ("provider", "transport"),
    [("efa", "efa"), ("efa;ofi_rxm", "efa"), ("cxi", "ofi"), ("verbs;ofi_rxm", "ofi"), ("tcp", "socket")],
)
def test_libfabric_is_judged_by_its_provider(provider: str, transport: str) -> None:
    # aws-ofi-nccl prints "NET/OFI Selected Provider is <provider>"; libfabric's tcp provider is TCP.
    assert (
        _transport(
            f"n1:10:10 [0] NCCL INFO NET/OFI Selected Provider is {provider} (found 4 nics)",
            "n1:10:10 [0] NCCL INFO Using network Libfabric",
        )
        == transport
    )


def test_libfabric_without_a_provider_line_does_not_pass_as_efa() -> None:
    report = parse_text("n1:10:10 [0] NCCL INFO Using network AWS Libfabric\nn2:20:20 [0] NCCL INFO Using network OFI")
    assert report.transport == "ofi"
    reasons = transport_reasons("efa", {p.label: p.transport for p in report.log.processes})
    assert reasons and "EFA provider" in reasons[0]


def test_a_network_the_gate_does_not_know_fails_with_its_own_line() -> None:
    report = parse_text("n1:10:10 [0] NCCL INFO Using network Mystery\nn2:20:20 [0] NCCL INFO Using network Mystery")
    assert report.transport == "unknown"
    assert report.log is not None and report.log.processes[0].unknown_network == "Mystery"
    for fabric in ("infiniband", "roce", "efa", "tcpx", "tcpxo"):
        reasons = transport_reasons(fabric, {p.label: p.transport for p in report.log.processes})
        assert len(reasons) == 1 and "does not know" in reasons[0]


def test_a_table_without_transport_lines_never_passes_a_fabric() -> None:
    report = parse_text(
        "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
        "1073741824 268435456 float sum -1 5000.0 214.75 402.65 0 5000.0 214.75 402.65 0\n"
    )
    verdict = fabric_verdict([report], "infiniband", 8, 2, expected_busbw_gbps=1.0)
    assert not verdict.passed
    assert [r for r in verdict.reasons if r.startswith("transport unknown")], verdict.reasons
    # a pool without a fabric does not need one
    assert fabric_verdict([report], "none", 8, 2).reasons == []


def test_one_silent_rank_among_rdma_ranks_fails() -> None:
    report = parse_text(
        "n1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
        "n1:10:10 [0] NCCL INFO Using network IB\n"
        "n2:20:20 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE\n"
    )
    reasons = transport_reasons("infiniband", {p.label: p.transport for p in report.log.processes})
    assert reasons == ["transport unknown for 1 rank(s) whose NCCL log names no network: rank 1 (n2 pid 20)"]
