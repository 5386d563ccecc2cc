"""Drills, in numbers: for each Kubernetes stack and each drill, `grpo-infra rehearse STACK --drill DRILL` on the
local real nodes, one after another, and two tables. A fault drill's: whether its cause reached the user in
one line, how long Kueue had held the gang's GPUs when it did, how long until they were released, and what
an unwatched gang would hold (waitForPodsReady's timeout once per admission). A node drill's: the step the
node was lost at, when the new Ray cluster came, and how long the gang's GPUs sat idle until the new attempt
checkpointed a step, against the stack's waitForPodsReady timeout + 1 min.

Not a test: `sudo .venv/bin/python benchmarks/drills_bench.py [STACK ...] [--drill DRILL ...]` (2-7 min a
drill). docs/rehearsal.md, "Drills", keeps the last tables.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from kube_bench import cluster_rss_mib

from grpo_infra.rehearsal import drills, node_drills
from grpo_infra.spec import load_stack

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "grpo-infra")
KUBERNETES_STACKS = ("eks-prod", "gke-dev", "gke-disagg", "onprem-k8s", "local-k8s")


def run(stack: str, drill: str | None, logs: Path) -> str:
    """Run one drill (`None`: the rehearsal alone) and keep its output (and its exit status, wall time and the
    local cluster's peak resident memory, sampled every 2 s: kube_bench.py `cluster_rss_mib`) in `logs`."""
    started = time.monotonic()
    kept = logs / f"{stack}-{drill or 'rehearsal'}.log"
    peak = 0.0
    with kept.open("w") as sink:
        proc = subprocess.Popen(
            [CLI, "rehearse", stack, *(["--drill", drill] if drill else [])],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
        while proc.poll() is None:
            peak = max(peak, cluster_rss_mib())
            time.sleep(2)
    with kept.open("a") as sink:
        sink.write(f"\nexit={proc.returncode} wall={time.monotonic() - started:.0f} peak_mib={peak:.0f}\n")
    return kept.read_text()


def peak_memory(text: str) -> str:
    found = re.search(r"peak_mib=(\d+)", text)
    return f"{int(found[1]) / 1024:.1f} GiB" if found else "-"


def row(stack: str, drill: str, out: str) -> list[str]:
    """A drill's row from its output: stack, drill, verdict, held, released, in all, unwatched, wall, peak memory,
    the cause."""
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
    return [stack, drill, verdict, held, released, total, drills.unwatched_hold(env), wall, peak_memory(text), cause]


def node_row(stack: str, drill: str, out: str) -> list[str]:
    """A node drill's row: stack, drill, verdict, node and step lost, new Ray cluster after, GPUs idle, goal, wall,
    peak memory, the resume."""
    text = re.sub(r"\s+", " ", out)
    found = re.search(
        rf"drill {drill} of {stack}: (\S+) lost at step (\d+); a new Ray cluster after (\d+)s; .*? the gang's GPUs "
        r"idle (\d+)s; SUCCEEDED(?: after (\d+) failed attempt\(s\), the last)?,? resumed from step (\d+)",
        text,
    )
    trailer = re.search(r"exit=(-?\d+) wall=(\d+)", text)
    code, wall = (int(trailer[1]), f"{int(trailer[2]) / 60:.1f} min") if trailer else (None, "-")
    env = load_stack(stack, ROOT).environment
    assert env.kubernetes is not None
    goal = env.kubernetes.pods_ready_timeout_minutes + 1
    if not found:
        why = re.search(rf"(drill {drill} of {stack}: .*?|error: .*?)(?= exit=|$)", text)
        return [
            stack,
            drill,
            f"FAILED (exit {code})",
            "-",
            "-",
            "-",
            f"{goal} min",
            wall,
            peak_memory(text),
            (why[0] if why else "")[:200],
        ]
    node, step, new_cluster, idle, failed, resumed = found.groups()
    verdict = "passed" if code in (0, None) and int(idle) <= goal * 60 else f"FAILED (exit {code})"
    return [
        stack,
        drill,
        verdict,
        f"{node} at step {step}",
        f"{new_cluster}s",
        f"{idle}s",
        f"{goal} min",
        wall,
        peak_memory(text),
        f"{failed or '?'} failed attempt(s), the last resumed from step {resumed}",
    ]


def table(header: list[str], rows: list[list[str]]) -> None:
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    every = [*drills.DRILLS, *node_drills.NODE_DRILLS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", nargs="*", default=list(KUBERNETES_STACKS))
    parser.add_argument("--drill", action="append", choices=every, default=None)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/grpo-drills"), help="each run's output")
    parser.add_argument("--from-logs", action="store_true", help="tabulate the kept outputs in --logs, run nothing")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    faults, losses = [], []
    for stack in args.stacks:
        for drill in args.drill or every:
            kept = args.logs / f"{stack}-{drill}.log"
            if args.from_logs and not kept.is_file():
                continue
            out = kept.read_text() if args.from_logs else run(stack, drill, args.logs)
            rows = losses if drill in node_drills.NODE_DRILLS else faults
            rows.append((node_row if drill in node_drills.NODE_DRILLS else row)(stack, drill, out))
            print(" | ".join(rows[-1]), flush=True)
    if faults:
        table(
            [
                "stack",
                "drill",
                "verdict",
                "held at the line",
                "released after",
                "in all",
                "unwatched",
                "wall",
                "peak memory",
                "line",
            ],
            faults,
        )
    if losses:
        header = [
            "stack",
            "drill",
            "verdict",
            "lost",
            "new Ray cluster after",
            "GPUs idle until a step resumed",
            "goal (waitForPodsReady + 1 min)",
            "wall",
            "peak memory",
            "resume",
        ]
        table(header, losses)
    return 0 if all(r[2] == "passed" for r in faults + losses) else 1


if __name__ == "__main__":
    sys.exit(main())
