"""How long `grpo-infra --help` takes to answer, and what it imports on the way.

Goal: at most 0.5 s on the 2-core development machine. The root command lists its subcommands without
importing them (grpo_infra/cli/__init__.py, `SUBCOMMANDS`), so the time is the interpreter, Typer and
Rich. Prints the wall and CPU time of a few runs (an idle interpreter for reference) and the slowest
imports of one run under `-X importtime`; asserts nothing.

    python benchmarks/cli_startup_bench.py [RUNS]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "grpo-infra --help": [sys.executable, "-m", "grpo_infra.cli", "--help"],
    "grpo-infra synth --help": [sys.executable, "-m", "grpo_infra.cli", "synth", "--help"],
}


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, user + system CPU) seconds of one run, from the project root so its code is imported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def slowest_imports(argv: list[str], count: int = 12) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the imports that took longest, nested ones included."""
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], cwd=ROOT, capture_output=True, text=True, check=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line.removeprefix("import time:").split("|")
            rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"{runs} runs each, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'command':<26}{'wall min':>10}{'wall median':>13}{'CPU min':>10}{'CPU median':>12}")
    for label, argv in COMMANDS.items():
        walls, cpus = zip(*(timed(argv) for _ in range(runs)), strict=True)
        print(
            f"{label:<26}{min(walls):>9.3f}s{statistics.median(walls):>12.3f}s"
            f"{min(cpus):>9.3f}s{statistics.median(cpus):>11.3f}s"
        )
    print("\nslowest imports of `grpo-infra --help` (cumulative):")
    for micros, name in slowest_imports(COMMANDS["grpo-infra --help"]):
        print(f"{micros / 1000:>9.1f} ms  {name}")


if __name__ == "__main__":
    main()
