"""NCCL_DEBUG=INFO logs: the transport each rank really uses, and GPUDirect RDMA."""

from __future__ import annotations

from pathlib import Path

from grpo_infra.preflight import parse_nccl_log, read_report

DATA = Path(__file__).parent / "data"


def test_infiniband_with_gpudirect_from_interleaved_log() -> None:
    report = read_report(DATA / "ib_ndr_2x8_h100_all_reduce.txt")
    assert report.log is not None
    assert report.transport == "infiniband"
    assert report.gpudirect_rdma is True
    assert {r for p in report.log.processes for r in p.ranks} == set(range(16))
    assert report.log.processes[0].devices[:2] == ["mlx5_0", "mlx5_1"]


def test_efa_through_the_ofi_plugin_under_mpirun_tags() -> None:
    report = read_report(DATA / "efa_p5_2x8_all_reduce_mpirun.txt")
    assert report.transport == "efa"
    assert report.gpudirect_rdma is True
    assert report.hosts == ["ip-10-0-1-17", "ip-10-0-3-204"]


def test_roce_is_told_apart_from_infiniband() -> None:
    report = read_report(DATA / "roce_2x8_ok.log")
    assert report.kind == "nccl-log"
    assert report.transport == "roce"
    assert report.problems == []


def test_one_rank_on_sockets_makes_the_file_mixed() -> None:
    report = read_report(DATA / "roce_one_rank_socket.log")
    assert report.transport == "mixed"
    assert report.log is not None
    assert [p.transport for p in report.log.socket_ranks] == ["socket"]
    assert any("rank 11" in p and "sockets" in p for p in report.problems)


def test_every_rank_on_sockets_is_socket() -> None:
    report = read_report(DATA / "socket_fallback_2x8_all_reduce.txt")
    assert report.transport == "socket"
    assert report.gpudirect_rdma is None


def test_gpudirect_off_when_channels_lack_gdrdma() -> None:
    log = "\n".join(
        [
            "n1:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
            "n1:100:100 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
            "n1:100:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
            "n2:200:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>",
            "n2:200:220 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0",
        ]
    )
    report = parse_nccl_log(log)
    assert report is not None
    assert report.transport == "infiniband"
    assert report.gpudirect_rdma is False


def test_old_ring_lines_with_aws_libfabric_name() -> None:
    log = "\n".join(
        [
            "[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO NET/OFI Selected Provider is efa",
            "[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0",
        ]
    )
    report = parse_nccl_log(log)
    assert report is not None and report.transport == "efa"


def test_text_without_nccl_lines_is_not_a_log() -> None:
    assert parse_nccl_log("hello\nworld\n") is None


# NCCL 2.4.0-2.4.7 bring up the socket transport in every process before trying IB, so each process prints
# both init lines (NVIDIA/nccl v2.4.7-1: src/init.cc:127 "Always initialize sockets", the formats at
# src/transport/net_socket.cc:42 "NET/Socket : Using%s", net_ib.cc:168 "NET/IB : Using%s ; OOB %s:%s",
# net.cc:306 "Ring %02d : %d -> %d [send] via NET/%s/%d%s", init.cc:298 "NCCL version ...+cuda...").
# Two 8-GPU nodes on NDR InfiniBand, one process shown per node.
OLD_IB = [
    "gpu-a01:4121:4121 [0] NCCL INFO NET/Socket : Using [0]ib0:10.10.0.1<0>",
    "gpu-a01:4121:4121 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.10.0.1<0>",
    "NCCL version 2.4.7+cuda10.1",
    "gpu-a02:7730:7730 [0] NCCL INFO NET/Socket : Using [0]ib0:10.10.0.2<0>",
    "gpu-a02:7730:7730 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.10.0.2<0>",
]
OLD_IB_RINGS = [
    "gpu-a01:4121:4160 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/IB/0/GDRDMA",
    "gpu-a01:4121:4160 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC",
    "gpu-a02:7730:7771 [0] NCCL INFO Ring 00 : 7 -> 8 [receive] via NET/IB/0/GDRDMA",
    "gpu-a02:7730:7771 [0] NCCL INFO Ring 00 : 8[0] -> 9[1] via P2P/IPC",
]


def test_old_nccls_socket_init_line_does_not_hide_infiniband() -> None:
    report = parse_nccl_log("\n".join(OLD_IB))  # init lines only (NCCL_DEBUG_SUBSYS=INIT cut short)
    assert report is not None
    assert [p.transport for p in report.processes] == ["infiniband", "infiniband"]
    assert report.transport == "infiniband" and report.problems == []


def test_old_nccl_ring_lines_over_ib_decide_even_with_socket_lines() -> None:
    report = parse_nccl_log("\n".join(OLD_IB + OLD_IB_RINGS))
    assert report is not None
    assert report.transport == "infiniband"
    assert report.gpudirect_rdma is True
    assert report.nccl_version == "2.4.7+cuda10.1"


def test_old_ranks_with_only_the_socket_line_are_unknown_not_socket() -> None:
    # gpu-a02's process printed its socket init line, and nothing else made it into the file.
    lines = [*OLD_IB[:3], OLD_IB[3], *OLD_IB_RINGS[:2]]
    report = parse_nccl_log("\n".join(lines))
    assert report is not None
    by_host = {p.host: p.transport for p in report.processes}
    assert by_host == {"gpu-a01": "infiniband", "gpu-a02": None}
    assert report.transport == "infiniband"
    assert report.problems == []
    assert any("gpu-a02 pid 7730" in n and "NET/Socket : Using" in n for n in report.notes), report.notes


def test_from_nccl_2_4_8_the_socket_line_alone_still_means_a_fallback() -> None:
    # 2.4.8 starts the socket transport only when IB did not come up (v2.4.8-1 src/init.cc:127-135).
    lines = [line.replace("2.4.7", "2.4.8") for line in [*OLD_IB[1:3], OLD_IB[3]]]
    report = parse_nccl_log("\n".join(lines))
    assert report is not None
    assert {p.host: p.transport for p in report.processes} == {"gpu-a01": "infiniband", "gpu-a02": "socket"}
    assert report.transport == "mixed"
    assert any("gpu-a02 pid 7730" in p and "fell back to sockets" in p for p in report.problems)
