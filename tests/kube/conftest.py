"""Fixtures of the tests on the local Kubernetes: one cluster per test session, shared by the modules
that want the same one.

Booting a cluster is the slow part of these tests (30-48 s with KWOK nodes, about 150 s with real ones),
so the session keeps ONE running (`LocalClusters`, the `local_clusters` fixture of tests/conftest.py): a
module asks for a configuration and gets the running cluster if it was booted with the same one, else the
running one is torn down and that one booted; the last goes at the session's end. The modules wanting
the same cluster say so (`pytest.mark.cluster("NAME")`) and run next to each other
(`pytest_collection_modifyitems` below), so each configuration boots once. In exchange every test leaves
the cluster as it found it (its objects deleted, its Pulumi stacks destroyed, its nodes back), or its
module has the configuration to itself and says so.

Tests marked `cluster` need the binaries of scripts/build-kube.sh: without them they skip on a
developer's machine and fail under CI (tests/conftest.py `unavailable`). One local cluster per
machine: this process holds /tmp/grpo-kube.lock for as long as a cluster of its session is up.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import secrets
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import k8s as render
from grpo_infra.k8s.labels import ray_token_secret_name
from grpo_infra.kube import cluster, realnodes
from grpo_infra.kube.plan import PULUMI_TOOLS, Paths, missing_tools
from grpo_infra.spec import Environment, load_stack
from tests.conftest import unavailable

from . import hoststate

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
    with machine_lock():
        try:
            cluster.up(
                "local-k8s", env, nodes=nodes, timeout=180, archives=archives, cpu_nodes=cpu_nodes, operators=operators
            )
            yield Paths(cluster.ROOT)
        finally:
            cluster.down()


_lock_depth = 0  # blocks of this process inside machine_lock()


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """The one local cluster of this machine, and the host paths its nodes share, held by this block alone
    (another checkout's tests wait here rather than tear it down or clear its files). Re-entrant within
    this process: a second flock on another open file of the lock would wait for the first for ever."""
    global _lock_depth
    if _lock_depth:
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    LOCK.touch(exist_ok=True)
    with LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _lock_depth = 1
        try:
            yield
        finally:
            _lock_depth = 0


class LocalClusters:
    """The one local cluster of a test session: `use` returns the running cluster if it was booted with
    the same configuration, else tears it down and boots that one. `close` takes it down (and lets go of
    the machine lock, held from the first boot on for as long as a cluster is up)."""

    def __init__(self) -> None:
        self.key: Hashable = None
        self.paths: Paths | None = None
        # This machine as it was before the running cluster's real nodes booted (hoststate.snapshot).
        self.host_before: dict[str, object] = {}
        self._up = contextlib.ExitStack()

    def use(
        self,
        env: Environment,
        nodes: str = "fake",
        archives: list[Path] | None = None,
        cpu_nodes: int = 1,
        operators: str = "processes",
        around: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> Paths:
        """The cluster `local_cluster` makes of these arguments. `around`: what must stay entered for as
        long as the cluster is up (entered before the boot, left after the teardown); not in the key."""
        key = (env.model_dump_json(), nodes, tuple(archives or ()), cpu_nodes, operators)
        if key == self.key and self.paths is not None:
            return self.paths
        self.close()
        require_binaries()
        if nodes == "real":
            require_real_nodes()
        with contextlib.ExitStack() as up:
            up.enter_context(machine_lock())
            self.host_before = hoststate.snapshot() if nodes == "real" else {}
            if around is not None:
                up.enter_context(around())
            paths = up.enter_context(local_cluster(env, nodes, archives, cpu_nodes, operators))
            self._up = up.pop_all()
        self.key, self.paths = key, paths
        return paths

    def close(self) -> None:
        self.key, self.paths = None, None
        self._up.close()


@pytest.fixture(scope="module")
def kube(local_clusters: LocalClusters) -> Paths:
    """The local-k8s stack's cluster: real control plane, Kueue, KubeRay, 4 fake (KWOK) 8-GPU nodes."""
    return local_clusters.use(local_k8s())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the modules marked `cluster("NAME")` with the same NAME run together, where the first
    of them was (each group keeps pytest's order); every other test keeps its place."""
    groups: dict[str, list[pytest.Item]] = {}
    slots: list[list[pytest.Item]] = []
    for item in items:
        marker = item.get_closest_marker("cluster")
        name = marker.args[0] if marker is not None and marker.args else None
        if name is None:
            slots.append([item])
        elif name in groups:
            groups[name].append(item)
        else:
            groups[name] = [item]
            slots.append(groups[name])
    items[:] = itertools.chain.from_iterable(slots)


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
