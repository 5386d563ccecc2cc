"""Synth time and output size for generated stacks of 16, 128 and 1,024 GPU nodes.

Goals: under 1 s at 1,024 nodes, growing linearly; slurm.conf lines growing with the number of pools,
not of nodes (hostlist ranges). Prints a table; asserts nothing.
"""

from __future__ import annotations

import copy
import statistics
import time
from pathlib import Path

import yaml

from grpo_infra import synth
from grpo_infra.spec import ENVIRONMENT_KEY, environment_from_config

ROOT = Path(__file__).resolve().parents[1]
SIZES = (16, 128, 1024)
POOLS = (1, 4)


def _config(stack: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def _slurm_config(nodes: int, pools: int) -> dict:
    config = copy.deepcopy(_config("onprem-slurm"))
    env = config[ENVIRONMENT_KEY]
    template = env["pools"][0]
    per_pool = nodes // pools
    env["pools"] = []
    for p in range(pools):
        pool = copy.deepcopy(template)
        pool["name"] = f"h100-{p}"
        pool["hosts"] = f"gpu{p}-[0001-{per_pool:04d}]"
        env["pools"].append(pool)
    env["job"]["pool"] = "h100-0"
    env["job"]["nodes"] = per_pool
    return config


def _k8s_config(nodes: int, pools: int) -> dict:
    config = copy.deepcopy(_config("onprem-k8s"))
    env = config[ENVIRONMENT_KEY]
    template = env["pools"][0]
    per_pool = nodes // pools
    env["pools"] = []
    for p in range(pools):
        pool = copy.deepcopy(template)
        pool["name"] = f"h100-{p}"
        pool["hosts"] = f"dc1-gpu{p}-[0001-{per_pool:04d}]"
        env["pools"].append(pool)
    env["job"]["pool"] = "h100-0"
    env["job"]["nodes"] = min(per_pool, 16)
    return config


def _secret_keys(config: dict) -> set[str]:
    return {k for k, v in config.items() if isinstance(v, dict) and set(v) == {"secure"}}


def measure(config: dict, repeats: int = 5) -> tuple[float, int, int]:
    """Median seconds for validate + render, total bytes, slurm.conf lines."""
    times = []
    files: dict[str, str] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        env = environment_from_config(config, _secret_keys(config), "bench")
        files = synth.render(env)
        times.append(time.perf_counter() - start)
    size = sum(len(t.encode()) for t in files.values())
    conf = files.get("slurm/slurm.conf", "")
    lines = sum(1 for line in conf.splitlines() if line.strip() and not line.startswith("#"))
    return statistics.median(times), size, lines


def main() -> None:
    print(f"{'target':<12}{'pools':>6}{'nodes':>7}{'GPUs':>7}{'seconds':>10}{'bytes':>10}{'conf lines':>12}")
    for target, build in (("slurm", _slurm_config), ("kubernetes", _k8s_config)):
        for pools in POOLS:
            for nodes in SIZES:
                seconds, size, lines = measure(build(nodes, pools))
                print(f"{target:<12}{pools:>6}{nodes:>7}{nodes * 8:>7}{seconds:>10.4f}{size:>10}{lines:>12}")


if __name__ == "__main__":
    main()
