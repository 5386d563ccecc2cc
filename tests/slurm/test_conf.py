"""The slurm.conf / gres.conf / topology.conf fragments an administrator includes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hostlist
import pytest

from grpo_infra.slurmgen import gres_conf, render_files, slurm_conf, topology_conf
from tests.conftest import unavailable
from tests.slurm.variants import SLURM_STACKS, stack, variant


def _settings(conf: str, prefix: str) -> list[dict[str, str]]:
    """`Key=Value ...` lines starting with `prefix`, as dicts."""
    return [dict(word.split("=", 1) for word in line.split()) for line in conf.splitlines() if line.startswith(prefix)]


def test_local_slurm_fragment() -> None:
    conf = slurm_conf(stack("local-slurm"))
    assert "GresTypes=gpu" in conf.splitlines()
    assert "SelectType=select/cons_tres" in conf
    [node] = _settings(conf, "NodeName=")
    assert node == {
        "NodeName": "node[1-3]",
        "CPUs": "4",
        "Sockets": "1",
        "CoresPerSocket": "4",
        "ThreadsPerCore": "1",
        "RealMemory": str(6 * 1024),
        "MemSpecLimit": "512",
        "Gres": "gpu:sim:8",
        "Features": "sim,placeholder",
        "State": "UNKNOWN",
    }
    [part] = _settings(conf, "PartitionName=")
    assert part["PartitionName"] == "grpo" and part["Nodes"] == "node[1-3]"
    assert part["OverSubscribe"] == "EXCLUSIVE" and part["MaxTime"] == "01:00:00"
    assert part["AllowAccounts"] == "sandbox" and part["AllowQos"] == "grpo-sandbox"


def test_onprem_fragment_allows_every_tenant() -> None:
    conf = slurm_conf(stack("onprem-slurm"))
    [node] = _settings(conf, "NodeName=")
    assert node["NodeName"] == "gpu[001-016]" and node["Gres"] == "gpu:h100:8"
    assert node["RealMemory"] == str(2000 * 1024)
    assert "infiniband" in node["Features"].split(",")
    [part] = _settings(conf, "PartitionName=")
    assert part["AllowAccounts"] == "alignment,research"
    assert part["AllowQos"] == "grpo-high,grpo-normal"
    assert "Include /etc/slurm/grpo/slurm.conf" in conf


@pytest.mark.parametrize(("setting", "expected"), [("exclusive", "EXCLUSIVE"), ("no", "NO"), ("yes", "YES")])
def test_oversubscribe_follows_the_spec(setting: str, expected: str) -> None:
    env = variant("local-slurm", lambda d: d["slurm"].update(oversubscribe=setting))
    [part] = _settings(slurm_conf(env), "PartitionName=")
    assert part["OverSubscribe"] == expected


def _add_pool(data: dict[str, Any], name: str, hosts: str) -> None:
    pool = {**data["pools"][0], "name": name, "hosts": hosts}
    data["pools"].append(pool)


def test_line_count_grows_with_pools_not_nodes() -> None:
    base = len(slurm_conf(stack("local-slurm")).splitlines())
    many_nodes = variant("local-slurm", lambda d: d["pools"][0].update(hosts="node[1-3,5-400]"))
    assert len(slurm_conf(many_nodes).splitlines()) == base
    assert len(gres_conf(many_nodes).splitlines()) == len(gres_conf(stack("local-slurm")).splitlines())
    two_pools = variant("local-slurm", lambda d: _add_pool(d, "sim-b", "extra[01-64]"))
    conf = slurm_conf(two_pools)
    assert len(conf.splitlines()) == base + 1
    [part] = _settings(conf, "PartitionName=")
    assert part["Nodes"] == "extra[01-64],node[1-3]"


def _scontrol_hostnames(expr: str, tmp_path: Path) -> list[str]:
    # scontrol needs a configuration source even to expand a hostlist; a two-line file is enough.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    proc = subprocess.run(
        ["scontrol", "show", "hostnames", expr],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_CONF": str(conf)},
    )
    return proc.stdout.split()


@pytest.mark.parametrize(
    "hosts", ["node[1-3]", "gpu[001-016]", "gpu[001-003,007,010-012]", "a[1-2]b[01-02]", "n9,n10,n11,m1"]
)
def test_hostlists_round_trip_through_scontrol(hosts: str, tmp_path: Path) -> None:
    if shutil.which("scontrol") is None:
        unavailable("scontrol not installed (Debian package slurm-client)")
    env = variant("local-slurm", lambda d: d["pools"][0].update(hosts=hosts))
    [node] = _settings(slurm_conf(env), "NodeName=")
    assert sorted(_scontrol_hostnames(node["NodeName"], tmp_path)) == sorted(hostlist.expand_hostlist(hosts))


def test_gres_device_files_per_pool() -> None:
    [line] = _settings(gres_conf(stack("local-slurm")), "NodeName=")
    assert line == {"NodeName": "node[1-3]", "Name": "gpu", "Type": "sim", "File": "/run/grpo-sandbox/dev/nvidia[0-7]"}
    assert "AutoDetect" not in gres_conf(stack("local-slurm"))


def test_gres_autodetect() -> None:
    conf = gres_conf(stack("onprem-slurm"))
    assert "AutoDetect=nvml" in conf.splitlines()
    assert not _settings(conf, "NodeName=")


def test_device_files_must_match_gpus_per_node() -> None:
    # Refused when the stack loads, so check, synth and pulumi up all see it before anything renders.
    with pytest.raises(ValueError, match=re.escape("names 4 devices, but pool sim has gpu.perNode 8")):
        variant("local-slurm", lambda d: d["slurm"].update(gres={"files": "/dev/nvidia[0-3]"}))


def test_topology_only_when_switches_are_described() -> None:
    assert topology_conf(stack("local-slurm")) is None
    assert "slurm/topology.conf" not in render_files(stack("local-slurm"))
    conf = render_files(stack("onprem-slurm"))["slurm/topology.conf"]
    assert _settings(conf, "SwitchName=") == [
        {"SwitchName": "leaf1", "Nodes": "gpu[001-008]"},
        {"SwitchName": "leaf2", "Nodes": "gpu[009-016]"},
        {"SwitchName": "spine", "Switches": "leaf[1-2]"},
    ]
    assert "TopologyPlugin=topology/tree" in conf


def test_switch_with_unknown_node_is_refused() -> None:
    # The spec refuses it as soon as the stack loads, before any file is rendered.
    with pytest.raises(ValueError, match="node4 is not a host of any pool"):
        topology_conf(
            variant("local-slurm", lambda d: d["slurm"].update(switches=[{"name": "leaf", "nodes": "node[3-4]"}]))
        )


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        ([{"name": "s1", "nodes": "node1", "switches": ["s2"]}], "exactly one of"),
        ([{"name": "s1", "nodes": "node1"}, {"name": "s1", "nodes": "node2"}], "named twice"),
        ([{"name": "spine", "switches": ["leaf9"]}], "leaf9, which is not another switch"),
    ],
)
def test_bad_switch_trees_are_refused(switches: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        variant("local-slurm", lambda d: d["slurm"].update(switches=switches))


@pytest.mark.parametrize("name", SLURM_STACKS)
def test_rendering_is_deterministic(name: str) -> None:
    assert render_files(stack(name)) == render_files(stack(name))


def test_onprem_node_line_has_slurmd_layout_and_memory_kept_for_the_system() -> None:
    [node] = _settings(slurm_conf(stack("onprem-slurm")), "NodeName=")
    # slurmd -C on a 2 x 56-core node with SMT: Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 (224 CPUs).
    assert (node["CPUs"], node["Sockets"], node["CoresPerSocket"], node["ThreadsPerCore"]) == ("224", "2", "56", "2")
    assert node["MemSpecLimit"] == "32768"


def test_a_pool_without_layout_gets_no_layout_words() -> None:
    env = variant("local-slurm", lambda d: d["slurm"].pop("nodeLayouts"))
    [node] = _settings(slurm_conf(env), "NodeName=")
    assert "Sockets" not in node and "MemSpecLimit" not in node


def test_site_lists_are_written_whole_once() -> None:
    """A second GresTypes line replaces the first (slurmctld logs "GresTypes 1 specified more than once,
    latest value used", Slurm 22.05): the fragment carries the site's whole list instead."""
    env = variant(
        "onprem-slurm",
        lambda d: d["slurm"].update(gresTypes=["gpu", "mps"], accountingTres=["gres/gpu", "license/matlab"]),
    )
    lines = slurm_conf(env).splitlines()
    assert [line for line in lines if line.startswith("GresTypes=")] == ["GresTypes=gpu,mps"]
    assert [line for line in lines if line.startswith("AccountingStorageTRES=")] == [
        "AccountingStorageTRES=gres/gpu,license/matlab"
    ]
    defaults = slurm_conf(stack("onprem-slurm")).splitlines()
    assert "GresTypes=gpu" in defaults and "AccountingStorageTRES=gres/gpu" in defaults


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("gresTypes", ["mps"], "must include gpu"), ("accountingTres", ["cpu"], "must include gres/gpu")],
)
def test_site_lists_must_keep_the_gpu(field: str, value: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        variant("onprem-slurm", lambda d: d["slurm"].update({field: value}))
