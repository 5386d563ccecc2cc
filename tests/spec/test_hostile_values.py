"""A value a stack file may hold is refused at the field, or lands in a rendered file as data, never as structure:
a hostlist cannot add a slurm.conf setting, a checkpoint path cannot run a command in the RayJob."""

from __future__ import annotations

import math
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from grpo_infra.k8s.rayjob import WORLD_SIZE_FILE, world_size_guard
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT


def raw_of(stack: str) -> dict[str, Any]:
    return load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True)


def refused_at(raw: dict[str, Any]) -> list[str]:
    """The field paths pydantic names refusing `raw`; [] when it is accepted."""
    try:
        Environment.model_validate(raw)
    except ValidationError as exc:
        return [".".join(str(p) for p in err["loc"]) for err in exc.errors()]
    return []


@pytest.mark.parametrize(
    "hosts",
    [
        "node[1-3] Prolog=/etc/slurm/p.sh",
        "node[1-3]\nNodeName=evil Prolog=/etc/slurm/p.sh",
        "node[1-2]\nnode3",
        "gpu[001-002] gpu[003-004]",
        "node[1-3]\tx",
        "node=[1-3]",
        "node[1-3]\u200b",
    ],
)
def test_a_hostlist_that_is_not_one_slurm_token_is_refused_at_pools_hosts(hosts: str) -> None:
    raw = raw_of("local-slurm")
    raw["pools"][0]["hosts"] = hosts
    assert refused_at(raw)[:1] == ["pools.0.hosts"]


def test_a_plain_hostlist_is_still_accepted() -> None:
    raw = raw_of("local-slurm")
    raw["pools"][0]["hosts"] = "node1,node[2-3]"
    assert refused_at(raw) == []


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("job", "checkpoint", "dir"), "/ckpt/\x1b[31mred"),
        (("job", "checkpoint", "dir"), "/ckpt/\u202eevil"),
        (("job", "checkpoint", "dir"), "/" + "a" * 5000),
        (("job", "modelPath"), "/models/x\x00y"),
        (("job", "project"), "   "),
        (("job", "experiment"), ""),
        (("job", "experiment"), "exp\u200b"),
        (("description",), "line one\nline two"),
        (("image", "ref"), "registry.example/" + "a" * 10_000),
        (("job", "env", "HF_HOME"), "/cache\nEVIL=1"),
        (("job", "overrides", "trainer.val_before_train"), "x\x07"),
    ],
)
def test_hostile_strings_are_refused_at_their_field(where: tuple[str, ...], value: str) -> None:
    raw = raw_of("local-k8s")
    target = raw
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert refused_at(raw) == [".".join(where)]


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_numbers_are_finite_even_in_verl_overrides(number: float) -> None:
    raw = raw_of("local-k8s")
    raw["job"]["overrides"] = {"actor_rollout_ref.actor.clip_ratio": number}
    assert refused_at(raw) == ["job.overrides.actor_rollout_ref.actor.clip_ratio"]
    raw["job"]["overrides"] = {}
    raw["job"]["kl"]["coef"] = number
    assert "job.kl.coef" in refused_at(raw)


HOSTILE_DIR_TAIL = '$(touch${IFS}PWNED)`touch${IFS}PWNED2`"'


def test_a_hostile_checkpoint_dir_is_printed_by_the_world_size_guard_never_run(tmp_path: Path) -> None:
    """The guard refuses a resume by another gang size with one line quoting the directory; the directory's
    `$(...)`, backquotes and `"` are text in that line, and the guard's shell still parses and exits 1."""
    raw = raw_of("local-k8s")
    directory = f"{tmp_path}/ck{HOSTILE_DIR_TAIL}"
    raw["job"]["checkpoint"]["dir"] = directory
    env = Environment.model_validate(raw)
    Path(directory).mkdir(parents=True)
    (Path(directory) / WORLD_SIZE_FILE).write_text("99x99\n")
    guard = world_size_guard(env)
    assert guard is not None
    run = subprocess.run(["sh", "-c", guard], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert run.returncode == 1, run.stderr
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()
    assert f"refused: the checkpoints in {directory} were written by a gang of 99x99" in run.stderr
    assert shlex.split(guard)  # one parseable shell line
