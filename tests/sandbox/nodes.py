"""Running rendered scripts on the sandbox's machines: each is a network + UTS namespace of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grpo_infra.sandbox.cluster import which
from grpo_infra.sandbox.plan import Plan

BIN = Path(sys.executable).parent
# The stand-in for verl: one task per node asking for all of that node's GPUs; it fails unless every
# node answers with its own 8 GPU ids, so the job SUCCEEDS only on the whole gang.
CHECK_GANG = """
import socket, sys, ray
ray.init()
@ray.remote(num_gpus=8, num_cpus=0)
def where():
    return socket.gethostname(), ray.get_gpu_ids()
alive = [n for n in ray.nodes() if n["Alive"]]
gpus = sum(n["Resources"].get("GPU", 0) for n in alive)
print(f"check-gang: {len(alive)} nodes, {gpus:g} GPUs", flush=True)
seen = dict(ray.get([where.remote() for _ in range(3)], timeout=120))
print("check-gang: hosts", sorted(seen), "gpus per host", sorted(len(g) for g in seen.values()), flush=True)
sys.exit(0 if len(alive) == 3 and gpus == 24 and sorted(seen) == ["node1", "node2", "node3"]
         and all(len(g) == 8 for g in seen.values()) else 1)
"""


def in_node_command(plan: Plan, name: str, argv: list[str]) -> list[str]:
    """`argv` on sandbox machine `name`: its network namespace, its own host name."""
    node = next(n for n in plan.nodes if n.name == name)
    return [
        which("nsenter") or "nsenter",
        f"--net=/run/netns/{node.namespace}",
        which("unshare") or "unshare",
        "--uts",
        "sh",
        "-c",
        f'hostname {name} && exec "$@"',
        "sh",
        *argv,
    ]


def ray_processes(root: Path) -> list[str]:
    """Command lines of every process running under `root` (all of a run's Ray lives there)."""
    out = subprocess.run(["pgrep", "-a", "-f", f"{root}(/| |$)"], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]
