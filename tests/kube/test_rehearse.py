"""`grpo-infra rehearse` in the test command, as docs/rehearsal.md runs it: a shipped production stack's own
objects through the real Pulumi engine on real kubelets shaped like its pools.

`gke-disagg` is the stack rehearsed here: the one whose layout only runs on real nodes (two GPU pools and a
head pool), and whose rehearsal found that KubeRay v1.6.2 dropped its workers' GPU count (docs/kubernetes.md,
"Disaggregated GRPO"). Kueue admits both roles' worker groups at once, every worker joins Ray with its GPUs
and its pool, and the probe, placing the roles as verl 0.9.1 does, puts every trainer rank on an a3-h100 node
and every rollout rank on a g2-l4 node; the tenant's documented steps pass under its own RBAC; the job's
NetworkPolicy, enforced by the nodes, lets the job's namespace reach the head, a stranger nothing, and the
stack's monitoring namespace the metrics port alone; `destroy` leaves nothing. About 5 minutes; the last module of the cluster tests, since it needs the machine's local
cluster to itself (the session's is closed first and booted again by any later module).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from .conftest import ROOT, LocalClusters, machine_lock
from .test_job_real import CLI

pytestmark = pytest.mark.cluster

STACK = "gke-disagg"


def table_rows(out: str) -> list[list[str]]:
    """The body rows of the placement table the rehearsal prints last (rich's box characters)."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line.startswith("│")]


def test_gke_disagg_rehearses_with_every_rank_on_its_roles_pool(local_clusters: LocalClusters) -> None:
    local_clusters.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    started = time.monotonic()
    with machine_lock():
        proc = subprocess.run([CLI, "rehearse", STACK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    seconds = time.monotonic() - started
    out = proc.stdout + proc.stderr
    print(out[-6000:])
    assert proc.returncode == 0, out[-4000:]
    # The substitutions, printed before anything runs.
    assert "entrypoint: verl (fully_async_main) -> the probe" in out
    assert "node pools: gke node groups -> the local real nodes, not created" in out
    # The tenant's documented steps, as the tenant.
    assert "as the tenant: kubectl -n dev get secrets: refused, as it must be" in out
    assert f"rehearsal of {STACK}: rayjob dev/grpo-qwen25-3b-disagg SUCCEEDED" in out
    # The NetworkPolicy, enforced on every node and tried once the job runs: the job's own namespace reaches
    # the head (which shows each port listens), a stranger beside the head nothing, the stack's
    # monitoringNamespace (gmp-system) the metrics port alone.
    policy = "network policy dev/grpo-qwen25-3b-disagg-ray: from"
    assert f"{policy} dev: GCS 6379 connected, metrics 8080 connected, dashboard 8265 connected" in out
    assert f"{policy} grpo-rehearsal-stranger: GCS 6379 refused, metrics 8080 refused, dashboard 8265 refused" in out
    assert f"{policy} gmp-system: GCS 6379 refused, metrics 8080 connected, dashboard 8265 refused" in out
    # role, pool, pod, Kubernetes node, address, GPUs in Ray, ranks, task saw GPUs
    rows = table_rows(out)
    assert sorted((r[0], r[1], re.sub(r"-\d+$", "", r[3]), r[5]) for r in rows) == [
        ("rollout", "g2-l4", "g2-l4", "4"),
        ("rollout", "g2-l4", "g2-l4", "4"),
        ("trainer", "a3-h100", "a3-h100", "8"),
        ("trainer", "a3-h100", "a3-h100", "8"),
    ], rows
    assert sorted(int(rank) for r in rows for rank in r[6].split(",")) == list(range(24))
    print(f"rehearsal of {STACK}: {seconds:.0f}s")
