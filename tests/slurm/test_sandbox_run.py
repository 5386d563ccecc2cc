"""The rendered sbatch on the real 3-node sandbox: addresses found on the hosts, verl's checkpoint deadline.

Run under `flock /tmp/grpo-sandbox.lock` (one sandbox per machine).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from grpo_infra.sandbox import jobs
from grpo_infra.sandbox.plan import Plan
from tests.sandbox.conftest import bring_up, local_slurm

pytestmark = pytest.mark.sandbox

# What the entrypoint prints: the deadline verl reads, and the address every raylet of the job bound to.
PROBE = 'echo "expiry=${MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP:-none}"; ' + shlex.join(
    [
        sys.executable,
        "-c",
        "import ray; ray.init(); "
        "print('raylets=' + ','.join(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))",
    ]
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Plan]:
    yield from bring_up(local_slurm())


@pytest.fixture(scope="module")
def finished(sandbox: Plan, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    job = jobs.submit(sandbox.sbatch, extra_env={"GRPO_ENTRYPOINT": PROBE}, cwd=tmp_path_factory.mktemp("submit"))
    state = jobs.wait_for_state(job, timeout=240)
    text = jobs.output(job)
    assert state == "COMPLETED", text[-3000:]
    return jobs.job_info(job), text


def test_every_raylet_binds_the_address_its_host_found(sandbox: Plan, finished: tuple[dict[str, str], str]) -> None:
    _, text = finished
    [raylets] = re.findall(r"^raylets=(.*)$", text, re.M)
    assert raylets.split(",") == sorted(n.address for n in sandbox.nodes)
    for node in sandbox.nodes:
        assert f"{node.name} uses {node.address} of interface eth0" in text


def test_verl_checkpoint_deadline_is_the_time_limit_less_signal_and_save(finished: tuple[dict[str, str], str]) -> None:
    info, text = finished
    [expiry] = re.findall(r"^expiry=(.*)$", text, re.M)
    start = datetime.fromisoformat(info["StartTime"]).timestamp()
    # local-slurm: --time=00:30:00, USR1 120 s before the end, checkpointSaveSeconds 60.
    assert int(expiry) == int(start) + 30 * 60 - 120 - 60


def test_the_synth_summary_names_a_long_output_path_on_one_line(tmp_path: Path) -> None:
    """The demo's synth summary on an 80-column terminal: the stack and the whole path on one line."""
    from typer.testing import CliRunner

    from grpo_infra.cli import app
    from tests.conftest import ROOT

    out = tmp_path / "a-rather-long-build-directory-name" / "that-goes-on-and-on" / "build"
    result = CliRunner().invoke(
        app, ["synth", "local-slurm", "--root", str(ROOT), "--out", str(out)], env={"COLUMNS": "80"}, terminal_width=80
    )
    assert result.exit_code == 0, result.output
    assert any(line.startswith(f"local-slurm → {out}/") for line in result.output.splitlines()), result.output


def test_the_demos_status_line_never_shows_an_empty_node_list(tmp_path: Path) -> None:
    """scripts/sandbox-demo.sh's status line, with squeue's answers for a pending and a running job."""
    from tests.conftest import ROOT

    script = (ROOT / "scripts" / "sandbox-demo.sh").read_text()
    line = next(ln for ln in script.splitlines() if "squeue -h" in ln)
    awk = script.split(line, 1)[1].splitlines()[1]  # the continuation line
    program = f'squeue() {{ printf "%s\\n" "$ANSWER"; }}\njob=7\n{line}\n{awk}\necho "$line"'
    for answer, shown in (
        ("7|PENDING||0:00|(BeginTime)", "job 7 PENDING (BeginTime)"),
        ("7|RUNNING|node[1-3]|0:12|node[1-3]", "job 7 RUNNING on node[1-3] for 0:12"),
    ):
        proc = subprocess.run(
            ["bash", "-c", program], env={"ANSWER": answer, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
        )
        assert proc.stdout.strip() == shown, proc.stderr
