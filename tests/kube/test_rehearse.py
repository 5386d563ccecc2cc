"""`grpo-infra rehearse` in the test command, as docs/rehearsal.md runs it: every shipped production stack's
own objects through the real Pulumi engine on real kubelets shaped like its pools, and each kind of Ray
object once (docs/rehearsal.md, "In the test command").

- `gke-disagg` as shipped: the one layout that only runs on real nodes (two GPU pools and a head pool), whose
  rehearsal found that KubeRay v1.6.2 dropped its workers' GPU count (docs/kubernetes.md, "Disaggregated
  GRPO"). Every worker joins Ray with its GPUs and its pool, and the probe, placing the roles as verl 0.9.1
  does, puts every trainer rank on an a3-h100 node and every rollout rank on a g2-l4 node.
- `eks-prod` as shipped (a RayJob): besides the run, the operators as their charts make them on a cloud
  (a Ready pod each, on a CPU node, the chart's image, leaving a lost node after 30 s; Kueue's visibility
  API through the API server) and `destroy` leaving nothing of the stack but KubeRay's CRDs, which Helm keeps.
- `gke-dev` switched to `kind: raycluster`, as a team switches it: admitted whole, ready, and the job sent
  by `grpo-infra submit --wait` with the tenant's own identity.
- `onprem-k8s` switched to `kind: raycronjob`: its first tick makes exactly one run, named by its tick, which
  SUCCEEDS (KubeRay v1.6.2 may make two for a tick, kuberay#4849).

In every one the tenant's documented steps pass under its own RBAC and the job's NetworkPolicy, enforced by
the nodes, lets the job's namespace reach the head and a stranger nothing. About 4-5 minutes each; the last
module of the cluster tests, since each rehearsal needs the machine's local cluster to itself (the session's
is closed first and booted again by any later module).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra.rehearsal.operators import kept_crds

from .conftest import ROOT, LocalClusters, machine_lock
from .test_job_real import CLI

pytestmark = pytest.mark.cluster


def table_rows(out: str) -> list[list[str]]:
    """The body rows of the placement table the rehearsal prints last (rich's box characters)."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line.startswith("│")]


def flat(out: str) -> str:
    """The output with every run of spaces and line breaks made one space: the console folds a long line."""
    return " ".join(out.split())


def rehearse(local_clusters: LocalClusters, stack: str, project: Path = ROOT) -> str:
    """`grpo-infra rehearse STACK --root PROJECT` with the machine's local cluster to itself: its output, the
    exit status asserted, the wall time printed."""
    local_clusters.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    started = time.monotonic()
    with machine_lock():
        proc = subprocess.run(
            [CLI, "rehearse", stack, "--root", str(project)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    out = proc.stdout + proc.stderr
    print(out[-6000:])
    assert proc.returncode == 0, out[-4000:]
    print(f"rehearsal of {stack}: {time.monotonic() - started:.0f}s")
    return out


def as_the_tenant_and_behind_its_policy(text: str, namespace: str, job: str) -> None:
    """The tenant's documented steps passed under its own RBAC, a step it may not do refused; the job's own
    namespace reached every port of the head, a stranger none."""
    assert f"as the tenant: kubectl -n {namespace} get secrets: refused, as it must be" in text
    policy = f"network policy {namespace}/{job}-ray: from"
    assert f"{policy} {namespace}: GCS 6379 connected, metrics 8080 connected, dashboard 8265 connected" in text
    assert f"{policy} grpo-rehearsal-stranger: GCS 6379 refused, metrics 8080 refused, dashboard 8265 refused" in text


def test_gke_disagg_rehearses_with_every_rank_on_its_roles_pool(local_clusters: LocalClusters) -> None:
    stack = "gke-disagg"
    out = rehearse(local_clusters, stack)
    text = flat(out)
    # The substitutions, printed before anything runs.
    assert "entrypoint: verl (fully_async_main) -> the probe" in text
    assert "node pools: gke node groups -> the local real nodes, not created" in text
    assert f"rehearsal of {stack}: rayjob dev/grpo-qwen25-3b-disagg SUCCEEDED" in text
    as_the_tenant_and_behind_its_policy(text, "dev", "grpo-qwen25-3b-disagg")
    # The stack's monitoringNamespace (gmp-system) reaches the metrics port alone.
    policy = "network policy dev/grpo-qwen25-3b-disagg-ray: from"
    assert f"{policy} gmp-system: GCS 6379 refused, metrics 8080 connected, dashboard 8265 refused" in text
    # role, pool, pod, Kubernetes node, address, GPUs in Ray, ranks, task saw GPUs
    rows = table_rows(out)
    assert sorted((r[0], r[1], re.sub(r"-\d+$", "", r[3]), r[5]) for r in rows) == [
        ("rollout", "g2-l4", "g2-l4", "4"),
        ("rollout", "g2-l4", "g2-l4", "4"),
        ("trainer", "a3-h100", "a3-h100", "8"),
        ("trainer", "a3-h100", "a3-h100", "8"),
    ], rows
    assert sorted(int(rank) for r in rows for rank in r[6].split(",")) == list(range(24))


def test_eks_prod_rehearses_with_the_operators_of_its_charts_and_destroy_leaves_nothing(
    local_clusters: LocalClusters,
) -> None:
    stack = "eks-prod"
    out = rehearse(local_clusters, stack)
    text = flat(out)
    assert "node pools: eks node groups -> the local real nodes, not created" in text
    assert "helm.sh/v3:Release kueue created" in text and "helm.sh/v3:Release kuberay-operator created" in text
    # Each operator a Ready pod of its chart on a CPU node (the head pool, the only untainted one), running
    # the image the chart names, leaving a lost node after 30 s; Kueue's visibility API served through the
    # API server (aggregation, front proxy).
    for namespace, image in (
        ("kueue-system", "registry.k8s.io/kueue/kueue:v0.19.2"),
        ("kuberay-system", "quay.io/kuberay/operator:v1.6.2"),
    ):
        line = (
            rf"operator {namespace}/\S+: Ready on grpo-cpu-\d, image {re.escape(image)}, leaves a lost node after 30 s"
        )
        assert re.search(line, text), out[-4000:]
    assert "operator kueue-system: its visibility API answers through the API server (grpo-post-training)" in text
    assert f"rehearsal of {stack}: rayjob post-training/grpo-qwen25-7b-math SUCCEEDED" in text
    as_the_tenant_and_behind_its_policy(text, "post-training", "grpo-qwen25-7b-math")
    assert kept_crds() == ["rayclusters.ray.io", "raycronjobs.ray.io", "rayjobs.ray.io", "rayservices.ray.io"]
    assert f"destroy: nothing of the stack left but KubeRay's CRDs ({', '.join(kept_crds())})" in text


def project_as(tmp_path: Path, stack: str, kind: str) -> Path:
    """A copy of the project whose `stack` runs as `kind`, as a team switches it: `job.kind`, and for a
    RayCronJob its schedule (nightly) and `checkpoint.resume: disable`, which `check` requires of one."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "stacks", project / "stacks")
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    path = project / "stacks" / f"Pulumi.{stack}.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    environment = data["config"]["grpo-infra:environment"]
    environment["job"]["kind"] = kind
    if kind == "raycronjob":
        environment["kubernetes"]["rayCronJob"] = {"schedule": "0 3 * * *", "timeZone": "Europe/Paris"}
        environment["job"]["checkpoint"]["resume"] = "disable"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return project


def test_gke_dev_rehearses_as_a_raycluster_the_tenant_submits_to(local_clusters: LocalClusters, tmp_path: Path) -> None:
    stack = "gke-dev"
    out = rehearse(local_clusters, stack, project_as(tmp_path, stack, "raycluster"))
    text = flat(out)
    # Admitted whole and ready, then the job sent as the tenant (a kubeconfig that is the tenant's own
    # identity) through the Jobs API, its ranks on both of the pool's nodes.
    assert "raycluster dev/grpo-qwen25-3b-dev: ready" in text
    assert f"as the tenant: grpo-infra submit {stack} --wait" in text
    assert "submitted grpo-qwen25-3b-dev-" in text and "SUCCEEDED: where every rank ran" in text
    assert "a3-h100-0" in text and "a3-h100-1" in text
    assert f"rehearsal of {stack}: raycluster dev/grpo-qwen25-3b-dev: its submission SUCCEEDED" in text
    as_the_tenant_and_behind_its_policy(text, "dev", "grpo-qwen25-3b-dev")


def test_onprem_k8s_rehearses_as_a_raycronjob_whose_tick_makes_one_run(
    local_clusters: LocalClusters, tmp_path: Path
) -> None:
    stack = "onprem-k8s"
    out = rehearse(local_clusters, stack, project_as(tmp_path, stack, "raycronjob"))
    text = flat(out)
    # The schedule became every minute (printed), and its first tick made exactly one run, named by its tick
    # (minutes since the epoch, as KubeRay v1.7.0 names it), which SUCCEEDED.
    assert "schedule: 0 3 * * * (Europe/Paris) -> every minute (* * * * *)" in text
    [(tick, run)] = re.findall(r"raycronjob rl-team/grpo-llama31-8b: the tick (\S+) made one run, (\S+)", text)
    minutes = int(datetime.fromisoformat(tick.replace("Z", "+00:00")).timestamp()) // 60
    assert run == f"grpo-llama31-8b-{minutes}", (tick, run)
    assert f"rehearsal of {stack}: rayjob rl-team/{run} SUCCEEDED" in text
    as_the_tenant_and_behind_its_policy(text, "rl-team", "grpo-llama31-8b")
