"""The rendered sbatch on the real 3-node sandbox: addresses found on the hosts, verl's checkpoint deadline.

Run under `flock /tmp/grpo-sandbox.lock` (one sandbox per machine).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from datetime import datetime

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
