"""Two launch paths whose Ray runs on the same machines must not share port ranges (check rule
ray-ports-overlap): within one stack (Slurm and the hand-started launcher on the Slurm pool's nodes) and
across the project's stacks (two stacks naming the same hosts)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from grpo_infra.check import violations
from grpo_infra.cli import app
from tests.conftest import ROOT
from tests.slurm.variants import variant


def test_a_launcher_range_overlapping_the_slurm_range_on_the_same_nodes_is_refused() -> None:
    env = variant("local-slurm", lambda d: d["launchers"]["ray"].update(rayPorts={"start": 29000, "end": 31000}))
    found = [v for v in violations(env) if v.rule == "ray-ports-overlap"]
    assert len(found) == 1
    assert found[0].line() == (
        "grpo-infra:environment.slurm.rayPorts: 20000-29999 overlaps grpo-infra:environment.launchers.ray.rayPorts "
        "29000-31000 on hosts "
        "node[1-3]: their Ray clusters can take the same ports; give each its own range (by 1000 ports) "
        "[ray-ports-overlap]"
    )
    # The shipped stack keeps them apart.
    shipped = variant("local-slurm", lambda d: None)
    assert not [v for v in violations(shipped) if v.rule == "ray-ports-overlap"]


def _project(tmp_path: Path, hosts: str, ports: dict[str, int]) -> Path:
    """The project with a second Slurm stack `lab-slurm`: local-slurm's file with other hosts and ports."""
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local-slurm.yaml").read_text())
    spec = document["config"]["grpo-infra:environment"]
    spec["slurm"]["rayPorts"] = ports
    spec.pop("launchers", None)
    for pool in spec["pools"]:
        pool["hosts"] = hosts
    (tmp_path / "stacks" / "Pulumi.lab-slurm.yaml").write_text(yaml.safe_dump(document))
    return tmp_path


def test_check_refuses_a_stack_whose_hosts_and_ports_another_stack_also_uses(tmp_path: Path) -> None:
    root = _project(tmp_path, "node[3-5]", {"start": 25000, "end": 27999})
    # lab-slurm loads (a stack that does not load is skipped by the other stacks' check)
    assert "ray-ports-overlap" in CliRunner().invoke(app, ["check", "lab-slurm", "--root", str(root)]).output
    result = CliRunner().invoke(app, ["check", "local-slurm", "--root", str(root), "--json"])
    assert result.exit_code == 1, result.output
    found = [v for v in json.loads(result.stdout) if v["rule"] == "ray-ports-overlap"]
    assert [(v["where"], v["severity"], v["by"]) for v in found] == [
        ("grpo-infra:environment.slurm.rayPorts", "error", "3000 ports")
    ]
    assert "stack lab-slurm's grpo-infra:environment.slurm.rayPorts 25000-27999 on hosts node3:" in found[0]["message"]
    table = CliRunner().invoke(app, ["check", "local-slurm", "--root", str(root)])
    assert table.exit_code == 1 and "ray-ports-overlap" in table.output


def test_stacks_on_other_hosts_or_other_ports_pass(tmp_path: Path) -> None:
    cases = {
        "other-hosts": ("node[4-6]", {"start": 20000, "end": 29999}),
        "other-ports": ("node[1-3]", {"start": 10000, "end": 19999}),
    }
    for name, (hosts, ports) in cases.items():
        (tmp_path / name).mkdir()
        root = _project(tmp_path / name, hosts, ports)
        assert CliRunner().invoke(app, ["check", "lab-slurm", "--root", str(root)]).exit_code == 0
        result = CliRunner().invoke(app, ["check", "local-slurm", "--root", str(root), "--json"])
        assert result.exit_code == 0, result.output
        assert not [v for v in json.loads(result.stdout) if v["rule"] == "ray-ports-overlap"]
