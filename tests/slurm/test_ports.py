"""The Ray port block: one rule in Python, the same arithmetic in the rendered sbatch."""

from __future__ import annotations

import subprocess
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from grpo_infra.ports import FIXED_OFFSETS, MIN_BLOCK_SIZE, WORKER_OFFSET, RayPorts, block_count, ray_ports
from grpo_infra.slurmgen import render_files
from tests.slurm.shell import functions
from tests.slurm.variants import SLURM_STACKS, stack, variant


def _shell_ports(script: str, job_ids: list[int]) -> dict[int, RayPorts]:
    """Run the rendered port snippet with bash for every job id; read back every variable."""
    names = [f.name for f in fields(RayPorts)]
    shell_vars = [f"GRPO_RAY_{n.upper()}_PORT" for n in names]
    program = (
        functions(script, "log", "fail", "ray_port_block")
        + "for SLURM_JOB_ID in "
        + " ".join(map(str, job_ids))
        + '; do\n  ray_port_block "$SLURM_JOB_ID"\n'
        + '  echo "$SLURM_JOB_ID '
        + " ".join(f"${v}" for v in shell_vars)
        + '"\n'
        + "done\n"
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        job, *ports = map(int, line.split())
        found[job] = RayPorts(**dict(zip(names, ports, strict=True)))
    return found


@pytest.mark.parametrize("name", SLURM_STACKS)
def test_shell_and_python_agree(name: str) -> None:
    env = stack(name)
    assert env.slurm is not None
    r = env.slurm.ray_ports
    script = render_files(env)["slurm/grpo.sbatch"]
    job_ids = [*range(0, 600), 4242, 65536, 999_999, 2**31 - 1, *range(10_000_000, 10_000_050)]
    shell = _shell_ports(script, job_ids)
    size = env.gang.pool.ray_block_size
    assert shell == {j: ray_ports(r.start, r.end, j, size) for j in job_ids}


@given(
    start=st.integers(1024, 60000),
    span=st.integers(MIN_BLOCK_SIZE, 20 * MIN_BLOCK_SIZE),
    block=st.sampled_from([MIN_BLOCK_SIZE, 320, 384, 1088]),
    first=st.integers(0, 10**9),
)
def test_consecutive_jobs_never_share_a_port(start: int, span: int, block: int, first: int) -> None:
    end = min(start + span - 1, 65535)
    blocks = block_count(start, end, block)
    if blocks < 1:
        return
    seen: set[int] = set()
    for job in range(first, first + blocks):
        ports = ray_ports(start, end, job, block)
        mine = ports.all()
        assert len(mine) == len(FIXED_OFFSETS) + block - WORKER_OFFSET
        assert min(mine) >= start and max(mine) <= end
        assert not seen & mine, f"job {job} reuses a port of an earlier job"
        seen |= mine


def test_fixed_ports_are_distinct_and_outside_the_worker_range() -> None:
    ports = ray_ports(20000, 29999, 7, MIN_BLOCK_SIZE)
    fixed = [getattr(ports, f.name) for f in fields(RayPorts) if f.name not in ("min_worker", "max_worker")]
    assert len(set(fixed)) == len(fixed)
    assert all(p < ports.min_worker for p in fixed)
    assert ports.max_worker - ports.min_worker + 1 >= 200  # room for every worker process of a GPU node


def test_a_range_smaller_than_one_block_is_refused() -> None:
    with pytest.raises(ValueError, match="smaller than one block"):
        ray_ports(20000, 20000 + MIN_BLOCK_SIZE - 2, 1, MIN_BLOCK_SIZE)
    with pytest.raises(ValidationError, match=f"must span at least {MIN_BLOCK_SIZE} ports"):
        variant("local-slurm", lambda d: d["slurm"].update(rayPorts={"start": 20000, "end": 20100}))
