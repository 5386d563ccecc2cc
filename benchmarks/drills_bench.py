"""Drills, in numbers: for each Kubernetes stack and each drill, `grpo-infra rehearse STACK --drill DRILL` on the
local real nodes, one after another, and a table of what each fault cost: whether its cause reached the user in
one line, how long Kueue had held the gang's GPUs when it did, how long until they were released, and what
an unwatched gang would hold (waitForPodsReady's timeout once per admission).

Not a test: `sudo .venv/bin/python benchmarks/drills_bench.py [STACK ...] [--drill DRILL ...]` (about 4 min a
drill). docs/rehearsal.md, "Drills", keeps the last table.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from grpo_infra.rehearsal import drills
from grpo_infra.spec import load_stack

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "grpo-infra")
KUBERNETES_STACKS = ("eks-prod", "gke-dev", "gke-disagg", "onprem-k8s", "local-k8s")


def one(stack: str, drill: str) -> list[str]:
    """One drill's row: stack, drill, cause line?, held, released, in all, unwatched, wall time."""
    started = time.monotonic()
    proc = subprocess.run([CLI, "rehearse", stack, "--drill", drill], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("rayjob ") and "held" in ln]
    got = drills.result(lines[-1] if lines else "")
    cause = re.sub(r"^rayjob \S+: ", "", lines[-1])[:90] + "…" if lines else "none: " + out.strip()[-120:]
    env = load_stack(stack, ROOT).environment
    held = "-" if got.held_s is None else f"{got.held_s}s"
    released = "-" if got.released_s is None else f"{got.released_s}s"
    total = "-" if not got.passed else f"{(got.held_s or 0) + (got.released_s or 0)}s"
    verdict = "passed" if proc.returncode == 0 and got.passed else f"FAILED (exit {proc.returncode})"
    return [stack, drill, verdict, held, released, total, drills.unwatched_hold(env), f"{wall / 60:.1f} min", cause]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="*", default=list(KUBERNETES_STACKS))
    parser.add_argument("--drill", action="append", choices=sorted(drills.DRILLS), default=None)
    args = parser.parse_args(argv)
    header = ["stack", "drill", "verdict", "held at the line", "released after", "in all", "unwatched", "wall", "line"]
    rows = []
    for stack in args.stacks:
        for drill in args.drill or list(drills.DRILLS):
            rows.append(one(stack, drill))
            print(" | ".join(rows[-1]), flush=True)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if all(r[2] == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
