"""The one line a dead Ray step ends the job with names the node and says why, whichever line reached the
step's log first: the node's own "stopped by itself with status N", else srun's report with its exit code."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grpo_infra.slurmgen import SBATCH_PATH, render_files
from tests.slurm.shell import functions
from tests.slurm.variants import stack


def _failure_line(tmp_path: Path, log_lines: list[str]) -> str:
    log = tmp_path / "ray-step.log"
    log.write_text("".join(f"{line}\n" for line in log_lines))
    body = functions(render_files(stack("local-slurm"))[SBATCH_PATH], "ray_step_failure")
    body += f'fail() {{ echo "FAIL $*"; }}\nray_step_log={log}\nray_step_failure "while the barrier ran"\n'
    done = subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_nodes_own_line_wins_over_sruns_that_came_first(tmp_path: Path) -> None:
    line = _failure_line(
        tmp_path,
        [
            "srun: error: node3: task 2: Exited with exit code 1",
            "grpo 05:27:33 [node3] Ray worker on node3 stopped by itself with status 1; the end of ...",
        ],
    )
    assert line == (
        "FAIL the Ray step ended on node3: its Ray stopped by itself with status 1, while the barrier ran "
        "(see its lines above)"
    )


def test_sruns_line_keeps_the_exit_code_when_the_node_said_nothing(tmp_path: Path) -> None:
    line = _failure_line(tmp_path, ["srun: error: node2: task 1: Exited with exit code 137"])
    assert line.startswith("FAIL the Ray step ended on node2: task 1: Exited with exit code 137, "), line
    assert _failure_line(tmp_path, ["srun: error: node2: task 1: Killed"]).startswith(
        "FAIL the Ray step ended on node2: task 1: Killed, "
    )
