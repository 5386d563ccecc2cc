"""Show where a sandbox job's gang ran: a Rich table of nodes, GPUs and Ray placement from the probe's output.

`python -m grpo_infra.sandbox.show JOBID` (after `eval "$(grpo-infra sandbox env)"`).
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from .. import probe_report
from . import jobs


def placement_table(job_id: int) -> Table:
    info = jobs.job_info(job_id)
    title = f"job {job_id} ({info.get('JobState', '?')}) on {info.get('NodeList', '?')}"
    return probe_report.placement_table(title, jobs.output(job_id), node_column="Slurm node")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m grpo_infra.sandbox.show JOBID", file=sys.stderr)
        return 2
    Console(width=max(Console().width, 110)).print(placement_table(int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
