"""Show where a sandbox job's gang ran: a Rich table of nodes, GPUs and Ray placement from the probe's output.

`python -m grpo_infra.sandbox.show JOBID` (after `eval "$(grpo-infra sandbox env)"`).
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from . import jobs


def placement_table(job_id: int) -> Table:
    info = jobs.job_info(job_id)
    events = {e["event"]: e for e in jobs.probe_events(jobs.output(job_id))}
    table = Table(title=f"job {job_id} ({info.get('JobState', '?')}) on {info.get('NodeList', '?')}")
    for column in ("Slurm node", "address", "GPUs in Ray", "bundle (STRICT_SPREAD)", "task saw GPUs", "Ray node id"):
        table.add_column(column)
    ips = {n["ray_node_id"]: n for n in events.get("nodes", {}).get("nodes", [])}
    for bundle in events.get("placement", {}).get("bundles", []):
        node = ips.get(bundle["ray_node_id"], {})
        table.add_row(
            bundle["node"],
            node.get("ip", "?"),
            str(node.get("gpus", "?")),
            str(bundle["bundle"]),
            ",".join(sorted(map(str, bundle["gpu_ids"]), key=int)),
            bundle["ray_node_id"][:12],
        )
    return table


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m grpo_infra.sandbox.show JOBID", file=sys.stderr)
        return 2
    Console(width=max(Console().width, 110)).print(placement_table(int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
