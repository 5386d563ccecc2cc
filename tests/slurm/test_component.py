"""The Pulumi component places exactly the rendered files, reconfigures Slurm, and removes them on destroy."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components import slurm as component
from grpo_infra.slurmgen import render_files
from tests.slurm.variants import stack, variant


class _Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


@pytest.fixture
def mocks() -> Iterator[_Recorder]:
    recorder = _Recorder()
    pulumi.runtime.set_mocks(recorder, project="grpo-infra", stack="test", preview=False)
    yield recorder


def _deploy(name: str, env_edit: Any = None) -> None:
    env = variant(name, env_edit) if env_edit else stack(name)
    pulumi.runtime.set_all_config(
        {"grpo-infra:environment": json.dumps(env.model_dump(by_alias=True, exclude_none=True))}
    )
    component.deploy_slurm(env)


@pulumi.runtime.test
def _run_local() -> None:
    _deploy("local-slurm")


def test_local_stack_places_files_with_the_dynamic_provider(mocks: _Recorder) -> None:
    _run_local()
    types = [(r.typ, r.name) for r in mocks.resources]
    assert len(types) == len(set(types)), "two resources share a URN"
    assert all(re.fullmatch(r"[a-z0-9-]+:[a-z0-9-]*:[A-Za-z]+", t) for t, _ in types), types
    assert ("grpo-infra:slurm:SlurmFiles", "slurm-files") in types
    [placed] = [r for r in mocks.resources if r.typ == "pulumi-python:dynamic:Resource"]
    assert placed.inputs["directory"] == "/run/grpo-sandbox/deploy"
    assert placed.inputs["reconfigure"] is False
    expected = {p.removeprefix("slurm/"): t for p, t in render_files(stack("local-slurm")).items()}
    assert placed.inputs["files"] == expected


@pulumi.runtime.test
def _run_remote() -> None:
    _deploy("onprem-slurm")


def test_remote_stack_places_files_over_ssh(mocks: _Recorder, tmp_path: Path) -> None:
    _run_remote()
    [cmd] = [r for r in mocks.resources if r.typ == "command:remote:Command"]
    # The SDK marks the connection secret: on the wire it is {signature, value}.
    connection = cmd.inputs["connection"]
    connection = connection.get("value", connection)
    assert connection["host"] == "slurm-ctl01" and connection["user"] == "slurmadm"
    create = cmd.inputs["create"]
    assert create.rstrip().endswith("scontrol reconfigure")
    # What the SSH host receives decodes to exactly the rendered files.
    payloads = re.findall(r"printf '%s' (\S+) \| base64 -d > \S*/\.(\S+)\.grpo-tmp", create)
    decoded = {name: base64.b64decode(p).decode() for p, name in payloads}
    assert decoded == {p.removeprefix("slurm/"): t for p, t in render_files(stack("onprem-slurm")).items()}
    [removal] = [line.split()[2:] for line in cmd.inputs["delete"].splitlines() if line.startswith("rm -f ")]
    assert "/etc/slurm/grpo/gres.conf" in removal and "/etc/slurm/grpo/accounting.sh" in removal


@pulumi.runtime.test
def _run_without_deploy() -> None:
    _deploy("local-slurm", lambda d: d["slurm"].pop("deploy"))


def test_no_deploy_block_places_nothing(mocks: _Recorder) -> None:
    _run_without_deploy()
    assert not [r for r in mocks.resources if r.typ != "pulumi:pulumi:Stack"]


# --- the provider's operations, called directly on a real directory ---------------------------


def _props(directory: Path, files: dict[str, str], reconfigure: bool = False) -> dict[str, Any]:
    return {"directory": str(directory), "files": files, "reconfigure": reconfigure}


def test_create_update_delete_on_a_real_directory(tmp_path: Path) -> None:
    provider = component.LocalFilesProvider()
    where = tmp_path / "etc" / "grpo"
    files = component.placed_files(stack("onprem-slurm"))
    created = provider.create(_props(where, files))
    assert created.id == str(where)
    assert {p.name: p.read_text() for p in where.iterdir()} == files
    assert stat.S_IMODE((where / "grpo.sbatch").stat().st_mode) == 0o755
    assert stat.S_IMODE((where / "slurm.conf").stat().st_mode) == 0o644

    # Dropping the switches drops topology.conf from the directory.
    smaller = component.placed_files(variant("onprem-slurm", lambda d: d["slurm"].pop("switches")))
    assert provider.diff(str(where), created.outs, _props(where, smaller)).changes
    provider.update(str(where), created.outs, _props(where, smaller))
    assert sorted(p.name for p in where.iterdir()) == ["accounting.sh", "gres.conf", "grpo.sbatch", "slurm.conf"]
    assert not provider.diff(str(where), _props(where, smaller), _props(where, smaller)).changes
    moved = provider.diff(str(where), _props(where, smaller), _props(tmp_path / "elsewhere", smaller))
    assert moved.replaces == ["directory"]

    # The admin's own file in the same directory survives destroy; ours go.
    (where / "site.conf").write_text("# not ours\n")
    provider.delete(str(where), _props(where, smaller))
    assert [p.name for p in where.iterdir()] == ["site.conf"]
    (where / "site.conf").unlink()
    provider.create(_props(where, smaller))
    provider.delete(str(where), _props(where, smaller))
    assert not where.exists()


def test_reconfigure_runs_scontrol_after_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in scontrol on PATH records its arguments: the real one needs a running slurmctld.
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    provider = component.LocalFilesProvider()
    files = component.placed_files(stack("local-slurm"))
    outs = provider.create(_props(tmp_path / "d", files, reconfigure=True)).outs
    provider.update("d", outs, _props(tmp_path / "d", files, reconfigure=True))  # unchanged: no reconfigure
    changed = {**files, "slurm.conf": files["slurm.conf"] + "# edited\n"}
    provider.update("d", outs, _props(tmp_path / "d", changed, reconfigure=True))
    assert log.read_text().splitlines() == ["reconfigure", "reconfigure"]


def test_reconfigure_failure_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_reconfigure error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(RuntimeError, match="Unable to contact slurm controller"):
        component.LocalFilesProvider().create(_props(tmp_path / "d", {"slurm.conf": "x\n"}, reconfigure=True))


def test_ssh_scripts_place_and_remove_the_same_files(tmp_path: Path) -> None:
    """The scripts remote.Command runs over SSH, run here with sh against a real directory."""
    where = tmp_path / "shared" / "grpo"
    files = component.placed_files(stack("onprem-slurm"))
    subprocess.run(["sh", "-c", component.placement_script(str(where), files, False)], check=True)
    assert {p.name: p.read_text() for p in where.iterdir()} == files
    assert os.access(where / "grpo.sbatch", os.X_OK)
    subprocess.run(["sh", "-c", component.removal_script(str(where), list(files))], check=True)
    assert not where.exists()
