"""Rehearsals, in numbers: for each Kubernetes stack, `grpo-infra rehearse STACK` on the local real nodes, one
after another (drills_bench.py `run`), and a table: the verdict, how the run ended, the wall time against the
goal of 3 minutes and the local cluster's peak resident memory (sampled every 2 s) against the goal of 8 GiB.

Not a test: `sudo .venv/bin/python benchmarks/rehearse_bench.py [STACK ...]` (3-5 min a stack).
docs/rehearsal.md, "Numbers", keeps the last table.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from drills_bench import KUBERNETES_STACKS, peak_memory, run, table

WALL_GOAL_S = 180
MEMORY_GOAL_GIB = 8.0


def row(stack: str, out: str) -> list[str]:
    """A rehearsal's row: stack, verdict, wall, peak memory, each against its goal."""
    text = re.sub(r"\s+", " ", out)
    trailer = re.search(r"exit=(-?\d+) wall=(\d+)", text)
    code, wall = (int(trailer[1]), int(trailer[2])) if trailer else (None, None)
    ended = re.findall(
        rf"rehearsal of {re.escape(stack)}: ((?:rayjob|raycluster) \S+(?: its submission)? [A-Z]+)\b", text
    )
    verdict = "passed" if code == 0 else f"FAILED (exit {code})"
    memory = peak_memory(text)
    over = []
    if wall is not None and wall > WALL_GOAL_S:
        over.append("wall")
    if memory != "-" and float(memory.split()[0]) > MEMORY_GOAL_GIB:
        over.append("memory")
    return [
        stack,
        verdict,
        ended[-1] if ended else "-",
        "-" if wall is None else f"{wall / 60:.1f} min",
        memory,
        "-" if code != 0 else ", ".join(f"{goal} over" for goal in over) or "both met",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="*", default=list(KUBERNETES_STACKS))
    parser.add_argument("--logs", type=Path, default=Path("/tmp/grpo-rehearsals"), help="each run's output")
    parser.add_argument("--from-logs", action="store_true", help="tabulate the kept outputs in --logs, run nothing")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for stack in args.stacks:
        kept = args.logs / f"{stack}-rehearsal.log"
        if args.from_logs and not kept.is_file():
            continue
        out = kept.read_text() if args.from_logs else run(stack, None, args.logs)
        rows.append(row(stack, out))
        print(" | ".join(rows[-1]), flush=True)
    header = [
        "stack",
        "verdict",
        "outcome",
        f"wall (goal {WALL_GOAL_S // 60} min)",
        "peak memory (goal 8 GiB)",
        "goals",
    ]
    table(header, rows)
    return 0 if all(r[1] == "passed" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
