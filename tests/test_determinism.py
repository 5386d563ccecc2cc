"""Same stack, same bytes: across processes, whatever the interpreter's string hash seed.

A set or dict ordered by hash would differ between two runs of `synth` (or `graph`) in different
processes even though it is stable within one; each process here gets its own PYTHONHASHSEED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, SHIPPED_STACKS

# One process per seed: synth every shipped stack and record its graph, then print a digest per file.
_SCRIPT = """
import hashlib, io, json, sys, contextlib
from pathlib import Path
from grpo_infra.cli import app
root, out = Path(sys.argv[1]), Path(sys.argv[2])
digests = {}
for stack in sys.argv[3:]:
    for args in (["synth", stack, "--out", str(out)], ["graph", stack, "--json"]):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            try:
                app([*args, "--root", str(root)], standalone_mode=False)
            except SystemExit as exc:
                assert not exc.code, (args, exc.code)
        if args[0] == "graph":
            digests[f"{stack} graph"] = hashlib.sha256(buffer.getvalue().encode()).hexdigest()
    for path in sorted((out / stack).rglob("*")):
        if path.is_file():
            digests[str(path.relative_to(out))] = hashlib.sha256(path.read_bytes()).hexdigest()
print(json.dumps(digests))
"""


def _digests(seed: str, out: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "COLUMNS": "200"}
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(ROOT), str(out), *SHIPPED_STACKS],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_stack_synthesizes_and_records_the_same_bytes_under_two_hash_seeds(tmp_path: Path) -> None:
    first, second = _digests("1", tmp_path / "a"), _digests("4242", tmp_path / "b")
    assert {k.split("/")[0].split(" ")[0] for k in first} == set(SHIPPED_STACKS)
    assert all(f"{s} graph" in first for s in SHIPPED_STACKS)
    differing = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
    assert not differing, f"differ between PYTHONHASHSEED=1 and 4242: {differing}"
