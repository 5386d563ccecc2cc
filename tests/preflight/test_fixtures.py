"""The synthetic fixtures of tests/preflight/data hold together, as real output would (see its README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grpo_infra.preflight.nccl_tests import parse_nccl_tests
from grpo_infra.spec import load_stack
from tests.conftest import ROOT

DATA = Path(__file__).parent / "data"
FILES = sorted(p for p in DATA.iterdir() if p.suffix in (".txt", ".log"))
# Files made from another by an edit: they share its run (and so its pids).
DERIVED = {
    "ib_tampered_busbw.txt": "ib_ndr_2x8_h100_all_reduce.txt",
    "truncated_all_reduce.txt": "ib_ndr_2x8_h100_all_reduce.txt",
}
# Tables meant to be sound: nccl-tests' arithmetic must hold on every row and in the average.
HEALTHY_TABLES = [
    "ib_ndr_2x8_h100_all_reduce.txt",
    "efa_p5_2x8_all_reduce_mpirun.txt",
    "socket_fallback_2x8_all_reduce.txt",
    "all_gather_2x8_new_layout.txt",
    "alltoall_2x8_new_layout.txt",
    "reduce_2x8_new_layout.txt",
    "reduce_scatter_2x8_new_layout.txt",
    "old_layout_error_column.txt",
    "alltoall_old_blank_redop.txt",
    "broadcast_old_no_hash.txt",
]
_RANK = re.compile(
    r"#\s+Rank\s+(\d+) (?:Group\s+\d+ )?Pid\s+(\d+) on\s+(\S+) device\s+(\d+) \[(0x[0-9a-f]+|[0-9a-f:]+)\]"
)
_INIT = re.compile(
    r"(\S+):(\d+):\d+ \[\d+\] NCCL INFO comm \S+ rank (\d+) nranks \d+ cudaDev \d+ nvmlDev \d+ busId ([0-9a-f]+)"
)
_PID = re.compile(r"(?:Pid\s+|:)(\d{4,6})(?=:\d+ \[|\s+on )")


def _pids(path: Path) -> set[str]:
    return set(_PID.findall(path.read_text()))


def test_the_readme_names_every_fixture() -> None:
    readme = (DATA / "README.md").read_text()
    assert "all synthetic" in readme
    missing = [p.name for p in FILES if f"`{p.name}`" not in readme]
    assert not missing, f"not described in tests/preflight/data/README.md: {missing}"


def test_distinct_runs_have_distinct_process_ids() -> None:
    runs = {p.name: _pids(p) for p in FILES if _pids(p)}
    for a in runs:
        for b in runs:
            if a < b and DERIVED.get(a) != b and DERIVED.get(b) != a and DERIVED.get(a, a) != DERIVED.get(b, b):
                shared = runs[a] & runs[b]
                assert not shared, f"{a} and {b} are different runs but share pids {sorted(shared)[:4]}"


@pytest.mark.parametrize(
    "path", [p for p in FILES if _INIT.search(p.read_text()) and _RANK.search(p.read_text())], ids=lambda p: p.name
)
def test_each_ranks_bus_id_host_and_pid_agree_between_the_rank_list_and_the_log(path: Path) -> None:
    text = path.read_text()
    listed = {int(r): (pid, host, bus) for r, pid, host, _, bus in _RANK.findall(text)}
    for host, pid, rank, bus in _INIT.findall(text):
        host = host.split(":")[-1].split(">")[-1]
        lpid, lhost, lbus = listed[int(rank)]
        assert (lpid, lhost) == (pid, host), f"rank {rank}: listed {lhost} pid {lpid}, logged {host} pid {pid}"
        # `[0000:18:00]` in the list is PCI domain:bus:device; NCCL prints bus and device as `18000`.
        assert f"{lbus.split(':')[1]}{lbus.split(':')[2]}0" == bus.zfill(5), f"rank {rank}: {lbus} vs busId {bus}"


def test_the_efa_log_shows_a_p5s_32_nics_four_per_gpu() -> None:
    pool = load_stack("eks-prod", ROOT).environment.pools[0]
    text = (DATA / "efa_p5_2x8_all_reduce_mpirun.txt").read_text()
    counts = {int(n) for n in re.findall(r"Selected Provider is efa \(found (\d+) nics\)", text)}
    assert counts == {pool.fabric.devices_per_node} == {32}
    per_gpu = pool.fabric.devices_per_node // pool.gpu.per_node
    for dev, nic in re.findall(r"\[(\d)\] NCCL INFO Channel \d+/0 : .* via NET/Libfabric/(\d+)/", text):
        assert int(nic) // per_gpu == int(dev), f"GPU {dev} sends over NIC {nic}, not one of its own"


@pytest.mark.parametrize("name", HEALTHY_TABLES)
def test_healthy_tables_follow_nccl_tests_arithmetic(name: str) -> None:
    report = parse_nccl_tests((DATA / name).read_text())
    assert report is not None
    assert report.problems == [], report.problems
