"""The local labs' one protocol (grpo_infra/localnode/bringup.py): both clusters answer to the same verbs, on the
command line too, and a bring-up is named steps whose failure names the step, copies the logs out and tears
down (or keeps) what was started. The labs' real bring-ups run in tests/kube and tests/sandbox."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_infra import sandbox
from grpo_infra.kube import cluster as kube
from grpo_infra.kube.plan import KubeError
from grpo_infra.localnode import bringup
from grpo_infra.sandbox import SandboxError

CLI = str(Path(sys.executable).with_name("grpo-infra"))
VERBS = ["kill-node", "boot-node", "down", "status", "env", "export-logs"]


@pytest.mark.parametrize("lab", [kube, sandbox], ids=["kube", "sandbox"])
def test_both_labs_answer_to_the_same_verbs(lab: object) -> None:
    assert isinstance(lab, bringup.Lab)


@pytest.mark.parametrize("name", ["kube", "sandbox"])
def test_both_labs_have_the_same_commands(name: str) -> None:
    out = subprocess.run([CLI, name, "--help"], capture_output=True, text=True, check=True).stdout
    commands = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and len(line.split()) > 1]
    assert set(VERBS) <= set(commands), commands
    up = subprocess.run([CLI, name, "up", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--keep-on-failure" in up


def a_lab(tmp_path: Path) -> Path:
    """A cluster root as a lab leaves it: daemons' logs, a node's logs, and files that are not logs."""
    root = tmp_path / "grpo-lab-0"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "kube-apiserver.log").write_text("E1206 apiserver: etcd unreachable\n")
    (root / "nodes" / "node1").mkdir(parents=True)
    (root / "nodes" / "node1" / "slurmd.out").write_text("slurmd: error: no such gres\n")
    (root / "pki").mkdir()
    (root / "pki" / "ca.key").write_text("SECRET")
    return root


def test_export_copies_every_log_at_its_path_and_nothing_else(tmp_path: Path) -> None:
    root = a_lab(tmp_path)
    dest = tmp_path / "out"
    (dest / "stale").mkdir(parents=True)
    written = bringup.export_logs(root, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in written) == [
        "logs/kube-apiserver.log",
        "nodes/node1/slurmd.out",
    ]
    assert (dest / "logs" / "kube-apiserver.log").read_text() == "E1206 apiserver: etcd unreachable\n"
    assert not (dest / "pki").exists() and not (dest / "stale").exists()


def test_export_keeps_the_end_of_a_long_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = a_lab(tmp_path)
    monkeypatch.setattr(bringup, "MAX_LOG_BYTES", 10)
    (root / "logs" / "long.log").write_text("0123456789" * 3 + "THE-END\n")
    bringup.export_logs(root, tmp_path / "out")
    assert (tmp_path / "out" / "logs" / "long.log").read_text() == "89THE-END\n"


@pytest.mark.parametrize("keep", [False, True])
def test_a_failed_step_is_named_its_logs_copied_out_and_the_lab_torn_down_unless_kept(
    tmp_path: Path, keep: bool
) -> None:
    root = a_lab(tmp_path)
    torn: list[str] = []

    def teardown() -> None:
        torn.append("down")
        shutil.rmtree(root)

    bring = bringup.BringUp("kube", root, teardown, KubeError, keep=keep)
    with bring.step("control plane"):
        pass
    with pytest.raises(KubeError) as raised, bring.step("real nodes"):
        raise RuntimeError("node grpo-gpu-1: kubelet exited 1")
    line = str(raised.value)
    logs = bringup.logs_dir(root)
    assert line.startswith("kube up: step 'real nodes' failed: node grpo-gpu-1: kubelet exited 1; its logs: ")
    assert (logs / "logs" / "kube-apiserver.log").is_file()
    assert set(bring.seconds) == {"control plane", "real nodes"}
    if keep:
        assert not torn and root.is_dir() and "left up for a look (`grpo-infra kube down` when done)" in line
    else:
        assert torn == ["down"] and line.endswith("; torn down")


def test_an_interrupted_bring_up_is_torn_down_and_stays_an_interrupt(tmp_path: Path) -> None:
    root = a_lab(tmp_path)
    torn: list[str] = []
    bring = bringup.BringUp("sandbox", root, lambda: torn.append("down"), SandboxError)
    with pytest.raises(KeyboardInterrupt), bring.step("slurmd"):
        raise KeyboardInterrupt
    assert torn == ["down"]
