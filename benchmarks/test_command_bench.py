"""Where the test command's time goes: its phases, read from a run's own output.

`scripts/test.sh` prints one `test-phase NAME SECONDS` line per phase (apt, venv, lint, the Ray tests on a
fresh /tmp, the tests without a cluster, the wait for the cluster tests) and the background parts print
theirs (the Go builds; the cluster tests, and how long they waited for the builds). The tests without a
cluster and the cluster tests run side by side, so the wall clock is the sum of the foreground phases, not
of every line. Prints a table; asserts nothing.

    bash scripts/test.sh 2>&1 | tee test.log; .venv/bin/python benchmarks/test_command_bench.py test.log
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PHASE = re.compile(r"^test-phase (\S+) (\d+)$")
# Printed by the background parts; they overlap the foreground ones.
BACKGROUND = {"go-builds", "cluster-waited-for-builds", "cluster-tests"}


def phases(text: str) -> list[tuple[str, int]]:
    """Every `test-phase` line of a run's output, in order."""
    return [(m.group(1), int(m.group(2))) for m in map(PHASE.match, text.splitlines()) if m]


def main(path: str) -> None:
    found = phases(Path(path).read_text(errors="replace"))
    if not found:
        raise SystemExit(f"{path}: no test-phase lines (a run of scripts/test.sh prints them)")
    wall = sum(seconds for name, seconds in found if name not in BACKGROUND)
    print(f"{'phase':<32} {'seconds':>8} {'minutes':>8}  runs")
    for name, seconds in found:
        where = "beside the foreground" if name in BACKGROUND else "foreground"
        print(f"{name:<32} {seconds:>8} {seconds / 60:>8.1f}  {where}")
    print(f"{'wall clock (foreground)':<32} {wall:>8} {wall / 60:>8.1f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: test_command_bench.py TEST_LOG")
    main(sys.argv[1])
