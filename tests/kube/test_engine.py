"""The real Pulumi engine (CLI, Kubernetes provider, Automation API inline program) on the local
cluster: preview, up, a reviewed change, destroy and up again, and an infeasible stack refused."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_infra import engine
from grpo_infra.check import violations
from grpo_infra.cli import app
from grpo_infra.kube import cluster
from grpo_infra.kube.plan import PULUMI_TOOLS, Paths
from grpo_infra.spec import load_stack

from .conftest import ROOT, get, require_binaries, unsuspended, wait_until

# On the session's local-k8s cluster with KWOK nodes (conftest.py `kube`).
pytestmark = pytest.mark.cluster("kwok")
# What the stack labels as its own (grpo_infra/k8s/namespaces.py MANAGED_BY).
OURS = "app.kubernetes.io/managed-by=grpo-infra"
KINDS = "namespaces,serviceaccounts,roles,rolebindings,networkpolicies,configmaps,rayjobs,rayclusters,pods"
CLUSTER_KINDS = "clusterqueues,resourceflavors,workloadpriorityclasses"
# Seconds `pulumi destroy` of local-k8s may take: finalizers run (KubeRay, Kueue, namespaces).
DESTROY_BOUND = 180


@pytest.fixture(scope="module", autouse=True)
def passphrase() -> None:
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "local-test-passphrase")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's stack files in a git repository of its own, so a test can edit one as a
    user would and review the change with `grpo-infra diff` against the last commit."""
    require_binaries(PULUMI_TOOLS)
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "stacks", root / "stacks")
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    git = ["git", "-C", str(root), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "stacks as shipped"], check=True)
    return root


def reviewed_files(project: Path) -> list[str]:
    """The rendered files `grpo-infra diff` reports changed, added or removed since the last commit."""
    result = CliRunner().invoke(app, ["diff", "local-k8s", "--root", str(project)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return sorted(re.findall(r"^[│|] (?:changed|added|removed) +[│|] (\S+)", result.output, re.M))


def edit_stack(project: Path, old: str, new: str) -> None:
    path = project / "stacks" / "Pulumi.local-k8s.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def ours_left(paths: Paths) -> list[str]:
    items = get(paths, KINDS, "-A", "-l", OURS)["items"] + get(paths, CLUSTER_KINDS, "-l", OURS)["items"]
    return [f"{i['kind']}/{i['metadata'].get('namespace', '')}/{i['metadata']['name']}" for i in items]


def test_an_infeasible_stack_is_refused_with_checks_message_and_creates_nothing(kube: Paths, project: Path) -> None:
    edit_stack(project, "gpuQuota: 24}", "gpuQuota: 16}")
    try:
        env = load_stack("local-k8s", project).environment
        expected = [v.line() for v in violations(env)]
        stack = engine.select("local-k8s", project, cluster.engine_settings("local-k8s"))
        with pytest.raises(engine.EngineError) as caught:
            engine.up(stack)
        assert "the gang is infeasible; nothing applied" in str(caught.value)
        assert expected and all(line[:60] in str(caught.value) for line in expected)
        assert ours_left(kube) == []
    finally:
        edit_stack(project, "gpuQuota: 16}", "gpuQuota: 24}")


def test_up_review_destroy_and_up_again(kube: Paths, project: Path) -> None:
    settings = cluster.engine_settings("local-k8s")
    stack = engine.select("local-k8s", project, settings)
    env = load_stack("local-k8s", project).environment

    try:
        plan = engine.preview(stack)
        assert plan.change_summary.get("create", 0) > 10
        started = time.monotonic()
        engine.up(stack)
        print(f"pulumi up of local-k8s: {time.monotonic() - started:.1f}s")
        assert get(kube, "clusterqueue", "grpo-rl-team")["spec"]["resourceGroups"]
        assert get(kube, "localqueue", "rl-team", "-n", "rl-team")["spec"]["clusterQueue"] == "grpo-rl-team"
        assert get(kube, "rolebinding", "-n", "rl-team")["items"]
        # The pool's nodes carry the stack's labels and taints (its NodePatches), and Kueue admits the gang.
        node = get(kube, "node", "local-gpu-2")
        assert node["metadata"]["labels"]["grpo-infra/pool"] == "sim-gpu"
        wait_until(lambda: unsuspended(get(kube, "rayjob", env.job.name, "-n", "rl-team")), 60, "admit")

        # Review: with nothing changed, nothing to do, and `grpo-infra diff` sees nothing either; one
        # tenant's quota lowered, exactly its ClusterQueue, in both.
        assert set(engine.preview(stack).change_summary) == {"same"}
        assert reviewed_files(project) == []
        edit_stack(
            project,
            "{name: eval-team, queue: eval-team, gpuQuota: 8}",
            "{name: eval-team, queue: eval-team, gpuQuota: 4}",
        )
        try:
            stack = engine.select("local-k8s", project, settings)
            lines: list[str] = []
            result = engine.preview(stack, on_output=lines.append)
            assert result.change_summary == {"same": result.change_summary["same"], "update": 1}, result.change_summary
            text = "\n".join(lines)  # pulumi preview --diff: the resource, then its id on the next line
            assert text.count("(update)") == 1, text
            assert re.search(
                r"~ kubernetes:kueue\.x-k8s\.io/v1beta2:ClusterQueue: \(update\)\n\s+\[id=grpo-eval-team\]", text
            ), text
            assert reviewed_files(project) == ["kubernetes/clusterqueue.grpo-eval-team.yaml"]
        finally:
            edit_stack(
                project,
                "{name: eval-team, queue: eval-team, gpuQuota: 4}",
                "{name: eval-team, queue: eval-team, gpuQuota: 8}",
            )
        stack = engine.select("local-k8s", project, settings)

        started = time.monotonic()
        engine.destroy(stack)
        took = time.monotonic() - started
        print(f"pulumi destroy of local-k8s: {took:.1f}s")
        assert took < DESTROY_BOUND
        assert ours_left(kube) == []

        # Reproducible: the same stack goes up again on the same cluster.
        engine.up(stack)
        wait_until(lambda: unsuspended(get(kube, "rayjob", env.job.name, "-n", "rl-team")), 60, "admit")
        engine.destroy(stack)
        assert ours_left(kube) == []
    except BaseException:
        # The cluster is shared with the next modules: what this test made goes, whatever failed.
        engine.destroy(engine.select("local-k8s", project, settings))
        raise
