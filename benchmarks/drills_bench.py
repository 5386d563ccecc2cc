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


def one(stack: str, drill: str, logs: Path) -> list[str]:
    """Run one drill, keep its output (and its exit status and wall time) in `logs`, and read its row."""
    started = time.monotonic()
    proc = subprocess.run([CLI, "rehearse", stack, "--drill", drill], cwd=ROOT, capture_output=True, text=True)
    out = proc.stdout + proc.stderr + f"\nexit={proc.returncode} wall={time.monotonic() - started:.0f}\n"
    (logs / f"{stack}-{drill}.log").write_text(out)
    return row(stack, drill, out)


def row(stack: str, drill: str, out: str) -> list[str]:
    """A drill's row from its output: stack, drill, verdict, held, released, in all, unwatched, wall, the cause."""
    # The CLI wraps its lines at 140 columns when not on a terminal: read them as one text.
    text = re.sub(r"\s+", " ", out)
    found = re.search(r"rayjob \S+: (pod .*?); the gang's GPUs held \d+s.*?(\)\)|$)", text)
    got = drills.result(found[0] if found else "")
    cause = (found[1][:150] + "…") if found else "no line: " + text[-100:]
    trailer = re.search(r"exit=(-?\d+) wall=(\d+)", text)
    code, wall = (int(trailer[1]), f"{int(trailer[2]) / 60:.1f} min") if trailer else (None, "-")
    env = load_stack(stack, ROOT).environment
    held = "-" if got.held_s is None else f"{got.held_s}s"
    released = "-" if got.released_s is None else f"{got.released_s}s"
    total = "-" if not got.passed else f"{(got.held_s or 0) + (got.released_s or 0)}s"
    verdict = "passed" if code in (0, None) and got.passed else f"FAILED (exit {code})"
    return [stack, drill, verdict, held, released, total, drills.unwatched_hold(env), wall, cause]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="*", default=list(KUBERNETES_STACKS))
    parser.add_argument("--drill", action="append", choices=sorted(drills.DRILLS), default=None)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/grpo-drills"), help="each run's output")
    parser.add_argument("--from-logs", action="store_true", help="tabulate the kept outputs in --logs, run nothing")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    header = ["stack", "drill", "verdict", "held at the line", "released after", "in all", "unwatched", "wall", "line"]
    rows = []
    for stack in args.stacks:
        for drill in args.drill or list(drills.DRILLS):
            kept = args.logs / f"{stack}-{drill}.log"
            if args.from_logs and not kept.is_file():
                continue
            rows.append(row(stack, drill, kept.read_text()) if args.from_logs else one(stack, drill, args.logs))
            print(" | ".join(rows[-1]), flush=True)
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    return 0 if all(r[2] == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
