"""The probe's `PROBE {json}` lines read back: its events, and the table of where every rank ran.

One reader for both local clusters: the Slurm sandbox's job output (`python -m grpo_infra.sandbox.show`)
and a RayJob's submitter log on the local Kubernetes (`grpo-infra up STACK --wait`).
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

MARK = "PROBE "


def events(text: str) -> list[dict[str, Any]]:
    """The probe's events in a log, in order (the submitter's lines may carry a prefix before the mark)."""
    found = []
    for line in text.splitlines():
        at = line.find(MARK + "{")
        if at >= 0:
            found.append(json.loads(line[at + len(MARK) :]))
    return found


def by_event(text: str) -> dict[str, dict[str, Any]]:
    """The last event of each kind."""
    return {e["event"]: e for e in events(text)}


def placement_table(title: str, text: str, node_column: str = "node", hosts: dict[str, str] | None = None) -> Table:
    """One row per bundle of the probe's first step: the node (host or pod) it ran on, that node's
    address and GPUs as Ray saw them, and the GPU IDs the task was given; with `hosts` (pod → Kubernetes
    node), the node each pod ran on."""
    seen = by_event(text)
    table = Table(title=title)
    columns = [node_column, *(["Kubernetes node"] if hosts is not None else [])]
    for column in (*columns, "address", "GPUs in Ray", "bundle (STRICT_SPREAD)", "task saw GPUs", "Ray node id"):
        table.add_column(column)
    nodes = {n["ray_node_id"]: n for n in seen.get("nodes", {}).get("nodes", [])}
    for bundle in seen.get("placement", {}).get("bundles", []):
        node = nodes.get(bundle["ray_node_id"], {})
        table.add_row(
            bundle["node"],
            *([hosts.get(bundle["node"], "?")] if hosts is not None else []),
            node.get("ip", "?"),
            str(node.get("gpus", "?")),
            str(bundle["bundle"]),
            ",".join(sorted(map(str, bundle["gpu_ids"]), key=int)),
            bundle["ray_node_id"][:12],
        )
    return table
