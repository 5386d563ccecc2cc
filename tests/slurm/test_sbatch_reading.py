"""The sbatch an administrator reads: what runs where, its ports, files and signals first, then the job's steps,
then everything they call; the embedded programs last."""

from __future__ import annotations

import re

import pytest

from grpo_infra.ports import block_count
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.slurmgen.sbatch import SIGNAL_BEFORE_LIMIT_S
from grpo_infra.spec import Environment
from tests.slurm.variants import SLURM_STACKS, stack

# The header and the job's steps together: what a reviewer reads before the functions start.
READING_LINES = 240


def _lines(env: Environment) -> list[str]:
    return render_files(env)[SBATCH_PATH].splitlines()


def _main(lines: list[str]) -> tuple[int, int]:
    """Index of `main() {` and of its closing brace."""
    start = lines.index("main() {")
    return start, start + lines[start:].index("}")


@pytest.mark.parametrize("name", SLURM_STACKS)
def test_the_header_says_where_it_runs_its_ports_files_signals_and_requeues(name: str) -> None:
    env = stack(name)
    assert env.slurm is not None
    lines = _lines(env)
    header = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))])
    ports, size = env.slurm.ray_ports, env.gang.pool.ray_block_size
    blocks = block_count(ports.start, ports.end, size)
    for row, must in {
        "Where": [f"{env.gang.nodes} whole nodes of partition {env.slurm.partition}", "is the Ray head"],
        "Ports": [f"{size} ports per run in {ports.start}-{ports.end}", f"(job id mod {blocks}) x {size}"],
        "Writes": ["$GRPO_RAY_TMPDIR/grpo-<job id>/", env.job.checkpoint.dir, f"{env.job.name}-<job id>.out"],
        "Signals": [f"USR1 {SIGNAL_BEFORE_LIMIT_S} s before the time limit", "TERM or INT"],
        "Requeues": [f"{env.slurm.retries} times in a row without a newer checkpoint"],
    }.items():
        assert re.search(rf"^#   {row} ", header, re.M), f"no {row} row in the header"
        for text in must:
            assert text in header, f"{row}: {text!r} not in the header"


@pytest.mark.parametrize("name", SLURM_STACKS)
def test_the_jobs_steps_come_right_after_the_directives_and_the_programs_after_them(name: str) -> None:
    lines = _lines(stack(name))
    start, end = _main(lines)
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    # Between the directives and the steps: only the shell's options and the output filter.
    assert start - last_directive < 12, lines[last_directive:start]
    assert end < READING_LINES, f"the header and the job's steps take {end} lines"
    steps = lines[start + 1 : end]
    assert not [line for line in steps if "<<'" in line or re.match(r"^\s*\w+\(\) \{", line)], (
        "the job's steps define no function and embed no program"
    )
    programs = [i for i, line in enumerate(lines) if "<<'PYTHON'" in line]
    assert programs and min(programs) > end
    assert lines[-1] == 'main "$@"', "the steps run once every function is defined"
