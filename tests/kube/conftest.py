"""Fixtures of the tests on the local Kubernetes: one cluster per module, torn down after it.

Tests marked `cluster` need the binaries of scripts/build-kube.sh: without them they skip on a
developer's machine and fail under CI (tests/conftest.py `unavailable`). One local cluster per
machine: every use holds /tmp/grpo-kube.lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import k8s as render
from grpo_infra.k8s.labels import ray_token_secret_name
from grpo_infra.kube import cluster, realnodes
from grpo_infra.kube.plan import PULUMI_TOOLS, Paths, missing_tools
from grpo_infra.spec import Environment, load_stack
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
LOCK = Path("/tmp/grpo-kube.lock")


def require_binaries(tools: dict | None = None) -> None:
    missing = missing_tools() if tools is None else missing_tools(tools)
    if missing:
        unavailable(f"local Kubernetes binaries not built ({' '.join(missing)}): run scripts/build-kube.sh")


def local_k8s() -> Environment:
    return load_stack("local-k8s", ROOT).environment


def with_changes(env: Environment, change: Callable[[dict[str, Any]], None]) -> Environment:
    """The environment after `change` edits its stack-file form (camelCase keys)."""
    data = env.model_dump(by_alias=True, exclude_none=True, mode="json")
    change(data)
    return Environment.model_validate(data)


def require_real_nodes() -> None:
    """Real nodes need root, containerd, runc, the CNI plugins, dnsmasq and a built kubelet."""
    require_binaries()
    reason = realnodes.unavailable()
    if reason:
        unavailable(reason)


@contextlib.contextmanager
def local_cluster(
    env: Environment,
    nodes: str = "fake",
    archives: list[Path] | None = None,
    locked: bool = False,
    cpu_nodes: int = 1,
    operators: str = "processes",
) -> Iterator[Paths]:
    """A local cluster made from `env` (its pools' nodes, its Kueue configuration), held alone on this
    machine for as long as the block runs, and removed after it. `nodes="fake"` (KWOK) for the
    admission tests, which need nodes larger than this machine; `"real"` for kubelets and containers.
    `operators="charts"`: no operator until `grpo-infra up` installs them from their charts (real nodes)."""
    require_binaries()
    if nodes == "real":
        require_real_nodes()
    with contextlib.ExitStack() as stack:
        if not locked:
            stack.enter_context(machine_lock())
        try:
            cluster.up(
                "local-k8s", env, nodes=nodes, timeout=180, archives=archives, cpu_nodes=cpu_nodes, operators=operators
            )
            yield Paths(cluster.ROOT)
        finally:
            cluster.down()


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """The one local cluster of this machine, and the host paths its nodes share, held by this block alone
    (another checkout's tests wait here rather than tear it down or clear its files)."""
    LOCK.touch(exist_ok=True)
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def kube() -> Iterator[Paths]:
    """The local-k8s stack's cluster: real control plane, Kueue, KubeRay, 4 fake (KWOK) 8-GPU nodes."""
    with local_cluster(local_k8s()) as paths:
        yield paths


def token_secret(env: Environment) -> dict[str, Any]:
    """The job's Ray token Secret as the Pulumi program makes it (components/kubernetes.py GrpoRayJob),
    with a throwaway value. KubeRay v1.6 reads it for the RayJob's whole life, deletion included: without
    it the RayJob's finalizer is never removed ("failed to get auth secret", controllers/ray/utils/util.go)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ray_token_secret_name(env),
            "namespace": env.job.tenant,
            "labels": dict(render.namespaces.MANAGED_BY),
        },
        "type": "Opaque",
        "stringData": {"auth_token": secrets.token_urlsafe(16)},
    }


def stack_objects(env: Environment) -> list[dict[str, Any]]:
    """What `pulumi up` creates for the stack, in its order: the rendered objects plus the token Secret,
    which the RayJob waits for (and which is deleted after it, in reverse order)."""
    objects = render.objects(env)
    if env.kubernetes is not None and env.kubernetes.ray_job.ray_auth == "token":
        at = next(i for i, o in enumerate(objects) if o["kind"] == "RayJob")
        objects.insert(at, token_secret(env))
    return objects


def unsuspended(job: dict[str, Any]) -> bool:
    """Kueue admitted the RayJob (rendered with `suspend: true`): on admission Kueue sets `spec.suspend`
    to false, which its client leaves out of the object (`omitempty`), so the field is gone, not false."""
    return job["spec"].get("suspend") is not True


def get(paths: Paths, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl(paths, "get", *args, "-o", "json"))


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


__all__ = ["PULUMI_TOOLS", "get", "local_k8s", "require_binaries", "wait_until", "with_changes"]
