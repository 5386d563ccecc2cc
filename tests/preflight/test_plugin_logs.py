"""Logs written through NCCL's network plugins give the transport the run really used, and a verdict.

Every log here is real text from a public thread or file (tests/preflight/data/real, index.yaml names each
source): aws-ofi-nccl on EFA, NVIDIA's RDMA/SHARP plugin (IBext, SHARP CollNet), Google's Fast Socket and
GPUDirect-TCPX plugins, and logs of WARN lines only (issue 31 item 19). Each passes the fabric its transport belongs to, fails every other
fabric with a line naming what NCCL used, and a WARN-only log fails every fabric with the one line that says
the transport cannot be told and how to make NCCL tell it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.preflight import parse_text
from grpo_infra.preflight.nccl_log import WARN_ONLY
from grpo_infra.preflight.verdict import GATE_FABRICS, fabric_verdict, transport_reasons

REAL = Path(__file__).parent / "data" / "real"
FABRICS = [fabric for fabric in GATE_FABRICS if fabric != "none"]

# file, the transport NCCL really used, the words a failing verdict names it by. Above each: the thread the
# excerpt is from, then where its line format is printed (the plugin's source at a commit, or NCCL's).
PLUGIN_LOGS = [
    # aws/aws-ofi-nccl#715 (aws-ofi-nccl 1.11.0-aws, p4d): "NET/OFI Setting provider_filter to efa", channels
    # "via NET/AWS Libfabric/2/GDRDMA", no "Selected Provider" line. Format: aws/aws-ofi-nccl
    # src/platform-aws.cpp@01666ece684caf1ce4c216d6c64396fd91e3cca4 platform_init, `NCCL_OFI_INFO(NCCL_INIT,
    # "Setting provider_filter to efa")` behind include/nccl_ofi_log.h's "NET/OFI " prefix.
    ("efa_sagemaker_provider_filter_gdrdma_timestamp_lines.log", "efa", "NCCL used efa"),
    # NVIDIA/nccl#1597 (p5en): "NET/OFI Selected Provider is efa (found 16 nics)", "Using network Libfabric".
    # Format: aws-ofi-nccl names itself `Libfabric` after v1.11.0 (src/nccl_ofi_interface_nvidia.c,
    # nvidia_plugin_name_fixup); NCCL prints the name in "Using network %s" (src/init.cc).
    ("efa_p5en_aws_ofi_nccl_using_network_libfabric.log", "efa", "NCCL used efa"),
    # NVIDIA/nccl#1357 (2 x 8 H100, HPC-X): "Loaded net plugin NCCL RDMA Plugin v6 (v6)", "Loaded collnet
    # plugin SHARP (v6)", "P2P plugin IBext", "Using network IBext", devices ".../IB/SHARP". Format:
    # Mellanox/nccl-rdma-sharp-plugins src/p2p_plugin.c@8eb729dd136b0b1dd0c7b3b57c5727477d36816d
    # (`"NCCL RDMA Plugin v6"`, `"P2P plugin %s"`), src/sharp_plugin.c (`ncclCollNetPlugin_v6 = {"SHARP", ...}`).
    ("ib_sharp_ibext_plugin_2x8.log", "infiniband", "NCCL used infiniband"),
    # NVIDIA/nccl#1737 (torchrun, NCCL 2.21.5): the plugin's v8 build, "P2P plugin IBext_v8", SHARP devices.
    ("ib_torchrun_ibext_v8_sharp_nccl2215.log", "infiniband", "NCCL used infiniband"),
    # NVIDIA/nccl#1016: HPC-X's IBext plugin on RoCE VFs ("rocep204s0f0v6:1/RoCE"); format as above.
    ("roce_k8s_pod_ibext_nccl218.log", "roce", "NCCL used roce"),
    # NVIDIA/nccl#1519 and #1267: Google's Fast Socket plugin, TCP. Format: NCCL's loader line "NET/Plugin: Loaded
    # net plugin FastSocket (v6)"; google/nccl-fastsocket net_fastsocket.cc@1c73af47267b120189d9be08ca406bac40ae47b1
    # ncclFastSocketInit: "NET/FastSocket : Tx CPU start: %d", "NET/FastSocket : Using%s" (" [%d]%s:%s" each).
    ("socket_gcp_fastsocket_plugin_nccl220.log", "socket", "fell back to sockets"),
    ("socket_gcp_fastsocket_plugin_nccl2143.log", "socket", "fell back to sockets"),
    # skypilot-org/skypilot examples/gcp_gpu_direct_tcpx/README.md, the two lines it says confirm TCPX, quoted
    # without NCCL's host prefix. Format: google/nccl-plugin-gpudirecttcpx
    # src/net_tcpx.cc@4b8ea7f2716fc21b026b4d09c79578d43b23e86d, `"NET/" PRODUCT_NAME " ver. " TCPX_VERSION_STRING`
    # with src/config.h.in's `PRODUCT_NAME "GPUDirectTCPX"`.
    ("tcpx_skypilot_plugin_init_lines_bare.log", "tcpx", "NCCL used tcpx"),
]
# Logs of WARN lines only. Format: NCCL src/debug.cc ncclDebugLog, `"%s:%d:%d [%d] %s:%d NCCL WARN "` (host, pid,
# tid, device, then the caller's filefunc and line: a plugin passes __PRETTY_FUNCTION__).
WARN_ONLY_LOGS = [
    "tcpx_plugin_warn_only_ctrl_timeout.log",  # google/nccl-plugin-gpudirecttcpx#1: "tcpxResult_t tcpxCommProgress(tcpxComm*):1231"
    "efa_warn_only_bracketed_timestamp.log",  # aws/aws-ofi-nccl#1020: "nccl_net_ofi_rdma_init:7978", "[2025-10-16 22:16:08] "
]
OWN_FABRIC = {"efa": "efa", "infiniband": "infiniband", "roce": "roce", "tcpx": "tcpx"}


def _ranks(name: str) -> dict[str, str | None]:
    report = parse_text((REAL / name).read_text(), name)
    assert report.log is not None, name
    # ranks that only print intra-node channels name no network: judged by the ranks that do
    return {p.label: p.transport for p in report.log.processes if p.transport}


@pytest.mark.parametrize(("name", "transport", "named"), PLUGIN_LOGS, ids=[p[0] for p in PLUGIN_LOGS])
def test_a_plugin_log_gives_the_transport_the_run_used(name: str, transport: str, named: str) -> None:
    report = parse_text((REAL / name).read_text(), name)
    assert report.transport == transport


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize(("name", "transport", "named"), PLUGIN_LOGS, ids=[p[0] for p in PLUGIN_LOGS])
def test_a_plugin_log_passes_its_own_fabric_and_names_what_it_got_otherwise(
    name: str, transport: str, named: str, fabric: str
) -> None:
    reasons = transport_reasons(fabric, _ranks(name))
    if OWN_FABRIC.get(transport) == fabric:
        assert reasons == []
    else:
        assert len(reasons) == 1 and named in reasons[0] and fabric in reasons[0], reasons


@pytest.mark.parametrize("fabric", [*FABRICS, "none"])
@pytest.mark.parametrize("name", WARN_ONLY_LOGS)
def test_a_warn_only_log_fails_with_one_line_saying_how_to_fix_it(name: str, fabric: str) -> None:
    report = parse_text((REAL / name).read_text(), name)
    assert report.log is not None and report.log.warn_only and report.transport is None
    assert WARN_ONLY in report.notes
    verdict = fabric_verdict([report], fabric, gpus_per_node=8, nodes=2, expected_busbw_gbps=0.001)
    assert not verdict.passed
    assert [r for r in verdict.reasons if r.startswith("transport unknown")] == [WARN_ONLY]
    assert "NCCL_DEBUG=INFO" in WARN_ONLY and "\n" not in WARN_ONLY


def test_a_warn_only_log_beside_a_table_still_fails_a_fabric_on_its_transport() -> None:
    table = (
        "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
        "1073741824 268435456 float sum -1 5000.0 214.75 402.65 0 5000.0 214.75 402.65 0\n"
    )
    warn = (REAL / "efa_warn_only_bracketed_timestamp.log").read_text()
    verdict = fabric_verdict([parse_text(table + warn, "ar.txt")], "efa", 8, 1 + 1, expected_busbw_gbps=1.0)
    assert not verdict.passed and WARN_ONLY in verdict.reasons


def test_warn_lines_are_read_whatever_names_their_source() -> None:
    """NCCL's `file.cc:12`, a plugin's `function:12`, a C++ signature with blanks: each is a WARN line."""
    for line in (
        "n1:10:10 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_create_cq failed",
        "n1:10:10 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call failed",
        "tcpxResult_t tcpxCommProgress(tcpxComm*):1231 NCCL WARN rx ctrl timeout",
    ):
        report = parse_text(line, "w.log")
        assert report.log is not None and report.log.warn_lines == 1, line
