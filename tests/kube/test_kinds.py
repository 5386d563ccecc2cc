"""`job.kind` on the local cluster (real API server, Kueue v0.19.2, KubeRay v1.6.2; KWOK's fake nodes, which
run no container — so Ray itself does not run here, see tests/k8s/test_submit.py for the Jobs API side): a
RayCluster admitted whole and its pods on the pool's nodes, its lifetime ending the workload and freeing the
quota; `pulumi preview --diff` between kinds. A RayCronJob's tick, its one run named by the tick and that run
on real nodes to SUCCEEDED: the onprem-k8s rehearsal, tests/kube/test_rehearse.py."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import engine
from grpo_infra import k8s as render
from grpo_infra.k8s.queues import cluster_queue_name
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import PULUMI_TOOLS, Paths
from grpo_infra.spec import Environment, load_stack
from grpo_infra.submit import refusal

from .conftest import ROOT, get, local_k8s, require_binaries, token_secret, wait_until, with_changes
from .test_cluster import apply_stack, delete_stack, pods

# On the session's local-k8s cluster with KWOK nodes (conftest.py `kube`).
pytestmark = pytest.mark.cluster("kwok")


def raycluster(**settings: Any) -> Any:
    """The stack file's change to `kind: raycluster` with these `kubernetes.rayCluster` settings."""

    def change(data: dict[str, Any]) -> None:
        data["job"]["kind"] = "raycluster"
        data["kubernetes"]["rayCluster"] = settings

    return change


def objects_with_token(env: Environment) -> list[dict[str, Any]]:
    """What `pulumi up` creates, the token Secret before the Ray object (which waits for it)."""
    objects = render.objects(env)
    at = next(i for i, o in enumerate(objects) if o["kind"] in ("RayJob", "RayCluster", "RayCronJob"))
    return [*objects[:at], token_secret(env), *objects[at:]]


def usage(paths: Paths, env: Environment) -> dict[str, str]:
    """The tenant ClusterQueue's used quota per resource (its status as Kueue writes it)."""
    queue = get(paths, "clusterqueue", cluster_queue_name(env.tenant(env.job.tenant)))
    out: dict[str, str] = {}
    for flavor in queue.get("status", {}).get("flavorsUsage", []):
        for resource in flavor.get("resources", []):
            if resource.get("total") not in (None, "0"):
                out[f"{flavor['name']}/{resource['name']}"] = resource["total"]
    return out


def test_a_raycluster_is_admitted_whole_and_its_lifetime_frees_the_quota(kube: Paths) -> None:
    # Long enough for `submit` to accept the cluster on a loaded machine before its lifetime suspends it.
    lifetime = 60
    env = with_changes(local_k8s(), raycluster(maxExecutionHours=lifetime / 3600))
    objects = objects_with_token(env)
    apply_stack(kube, objects)
    ns, name = env.job.tenant, env.job.name
    try:
        wait_until(
            lambda: get(kube, "raycluster", name, "-n", ns).get("status", {}).get("state") == "ready",
            120,
            "RayCluster admitted and ready",
        )
        admitted_at = time.monotonic()
        [workload] = get(kube, "workloads", "-n", ns)["items"]
        assert workload["spec"]["maximumExecutionTimeSeconds"] == lifetime
        assert workload["status"]["admission"]["clusterQueue"] == cluster_queue_name(env.tenant(ns))
        podsets = {p["name"]: p["count"] for p in workload["spec"]["podSets"]}
        assert podsets == {"head": 1, env.gang.pool.name: env.gang.nodes}, "the whole gang, no submitter"
        workers = [p for p in pods(kube, ns) if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        assert len(workers) == env.gang.nodes
        assert all(p["spec"]["nodeName"].startswith("local-gpu-") for p in workers)
        assert len({p["spec"]["nodeName"] for p in workers}) == env.gang.nodes, "one node each"
        assert usage(kube, env), "the gang holds quota while it runs"
        # `submit` reads these same objects, read afresh each time as a user's `submit` would; KWOK reports every
        # container Ready (the gate never ran here). Under load KubeRay's status was seen `ready` with its count
        # of ready workers a pod behind, which `submit` refuses: a user who sends the job a moment later is
        # accepted, so the test waits as one would, and names the last refusal if it never comes.
        said: list[str | None] = [None]

        def accepted() -> bool:
            head = next((p for p in pods(kube, ns) if p["metadata"]["labels"].get("ray.io/node-type") == "head"), None)
            said[0] = refusal(env, get(kube, "raycluster", name, "-n", ns), head)
            return said[0] is None

        try:
            wait_until(accepted, 60, "`submit` accepting the admitted, ready RayCluster")
        except AssertionError as late:
            raise AssertionError(f"{late}; its last refusal: {said[0]}") from None

        wait_until(
            lambda: get(kube, "workloads", "-n", ns)["items"][0]["spec"].get("active") is False,
            lifetime + 90,
            "deactivated at its maximum execution time",
        )
        ended = time.monotonic() - admitted_at
        wait_until(lambda: get(kube, "raycluster", name, "-n", ns)["spec"].get("suspend") is True, 60, "suspended")
        wait_until(
            lambda: not [p for p in pods(kube, ns) if p["metadata"]["labels"].get("ray.io/node-type")], 90, "pods gone"
        )
        wait_until(lambda: usage(kube, env) == {}, 60, "quota freed")
        print(f"raycluster lifetime {lifetime}s: deactivated {ended:.0f}s after Ready")
        reason = refusal(env, get(kube, "raycluster", name, "-n", ns), None)
        assert reason is not None and "not admitted" in reason
    finally:
        delete_stack(kube, objects)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    require_binaries(PULUMI_TOOLS)
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "local-test-passphrase")
    return tmp_path


def test_preview_between_kinds_replaces_the_ray_object_and_nothing_else(kube: Paths, project: Path) -> None:
    settings = cluster.engine_settings("local-k8s")
    stack = engine.select("local-k8s", project, settings)
    engine.up(stack)
    try:
        path = project / "stacks" / "Pulumi.local-k8s.yaml"
        path.write_text(
            path.read_text().replace(
                "      name: grpo-qwen25-05b\n", "      name: grpo-qwen25-05b\n      kind: raycluster\n", 1
            )
        )
        assert load_stack("local-k8s", project).environment.job.kind == "raycluster"
        lines: list[str] = []
        result = engine.preview(engine.select("local-k8s", project, settings), on_output=lines.append)
        text = "\n".join(lines)
        print(text)
        assert re.search(r"\+ kubernetes:ray\.io/v1:RayCluster: \(create\)", text), text
        assert re.search(r"- kubernetes:ray\.io/v1:RayJob: \(delete\)", text), text
        # The budget counts one pod fewer (no submitter); nothing else of the stack changes.
        assert re.search(r"~ kubernetes:policy/v1:PodDisruptionBudget: \(update\)", text), text
        updated = re.findall(r"~ (\S+): \(update\)", text)
        assert set(updated) <= {"kubernetes:policy/v1:PodDisruptionBudget", "pulumi:pulumi:Stack"}, updated
        assert result.change_summary.get("create") == 1 and result.change_summary.get("delete") == 1, (
            result.change_summary
        )
        assert "replace" not in result.change_summary, result.change_summary
    finally:
        engine.destroy(engine.select("local-k8s", project, settings))
