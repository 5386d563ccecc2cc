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
from grpo_infra.check import violations
from grpo_infra.spec import ENVIRONMENT_KEY, environment_from_config

ROOT = Path(__file__).resolve().parents[1]
SIZES = (16, 128, 1024)
POOLS = (1, 4)


def _config(stack: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def _scaled_config(stack: str, host_prefix: str, nodes: int, pools: int, max_job_nodes: int) -> dict:
    """The stack with `pools` copies of its pool, `nodes` hosts in all, the job on the first pool."""
    config = copy.deepcopy(_config(stack))
    env = config[ENVIRONMENT_KEY]
    template = env["pools"][0]
    per_pool = nodes // pools
    env["pools"] = []
    for p in range(pools):
        pool = copy.deepcopy(template)
        pool["name"] = f"h100-{p}"
        pool["hosts"] = f"{host_prefix}{p}-[0001-{per_pool:04d}]"
        env["pools"].append(pool)
    env["job"]["pool"] = "h100-0"
    env["job"]["nodes"] = min(per_pool, max_job_nodes)
    env["tenants"] = [{**env["tenants"][0], "gpuQuota": per_pool * template["gpu"]["perNode"]}]
    env["job"]["tenant"] = env["tenants"][0]["name"]
    if "slurm" in env:
        env["slurm"].pop("switches", None)  # the shipped tree names the shipped hosts
    return config


def _slurm_config(nodes: int, pools: int) -> dict:
    return _scaled_config("onprem-slurm", "gpu", nodes, pools, max_job_nodes=8)


def _k8s_config(nodes: int, pools: int) -> dict:
    # The job keeps its size; what grows is the cluster (pools, hosts, quotas).
    return _scaled_config("onprem-k8s", "dc1-gpu", nodes, pools, max_job_nodes=16)


def _secret_keys(config: dict) -> set[str]:
    return {k for k, v in config.items() if isinstance(v, dict) and set(v) == {"secure"}}


def measure(config: dict, repeats: int = 5) -> tuple[float, int, int]:
    """Median seconds for what `synth` does (validate, check, render), total bytes, slurm.conf lines."""
    times = []
    files: dict[str, str] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        env = environment_from_config(config, _secret_keys(config), "bench")
        if violations(env):
            raise SystemExit("the generated stack is infeasible")
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
