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
    nodes = {n["ray_node_id"]: n for n in seen.get("nodes", {}).get("nodes", [])}
    if "ranks" in seen.get("placement", {}):
        return _role_table(title, seen["placement"]["ranks"], nodes, node_column, hosts)
    table = Table(title=title)
    columns = [node_column, *(["Kubernetes node"] if hosts is not None else [])]
    for column in (*columns, "address", "GPUs in Ray", "bundle (STRICT_SPREAD)", "task saw GPUs", "Ray node id"):
        table.add_column(column)
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


def _role_table(
    title: str,
    ranks: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    node_column: str,
    hosts: dict[str, str] | None,
) -> Table:
    """A disaggregated job's placement: one row per role and node, the ranks it ran there and the pool the
    node advertises, which the probe has already checked against the role's (probe.py `misplaced`)."""
    table = Table(title=title)
    columns = ["role", "pool", node_column, *(["Kubernetes node"] if hosts is not None else [])]
    for column in (*columns, "address", "GPUs in Ray", "ranks", "task saw GPUs"):
        table.add_column(column)
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rank in ranks:
        rows.setdefault((rank["role"], rank["node"]), []).append(rank)
    for (role, node_name), held in rows.items():
        node = nodes.get(held[0]["ray_node_id"], {})
        table.add_row(
            role,
            str(held[0].get("pool")),
            node_name,
            *([hosts.get(node_name, "?")] if hosts is not None else []),
            node.get("ip", "?"),
            str(node.get("gpus", "?")),
            ",".join(str(r["rank"]) for r in held),
            ",".join(sorted((str(g) for r in held for g in r["gpu_ids"]), key=int)),
        )
    return table
