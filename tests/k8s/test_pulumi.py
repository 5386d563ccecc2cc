"""The real Pulumi program for each Kubernetes stack under the SDK's mock runtime (no CLI, no cluster).

Uses the project's recorder (`grpo_infra.pulumi_graph.record`), which runs `components.program.deploy`
— what `__main__.py` runs — with the stack file's config and a monitor recording every registration.
"""

from __future__ import annotations

from functools import cache

import pytest

from grpo_infra import k8s as render
from grpo_infra.k8s.operators import chart_path
from grpo_infra.pulumi_graph import SECRET, Graph, Resource, record
from tests.conftest import ROOT

from .conftest import K8S_STACKS, env_of

RAYJOB = "kubernetes:ray.io/v1:RayJob"
RELEASE = "kubernetes:helm.sh/v3:Release"


@cache
def graph(stack: str) -> Graph:
    return record(stack, ROOT)


def _component(g: Graph, resource: Resource) -> Resource:
    assert resource.parent is not None, f"{resource.urn} has no parent component"
    return g[resource.parent]


def _rayjob(g: Graph, stack: str) -> Resource:
    env = env_of(stack)
    return g.named(RAYJOB, f"{env.job.tenant}-{env.job.name}")


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_components_and_their_children(stack: str) -> None:
    g = graph(stack)
    types = {r.type for r in g.resources}
    assert {
        "grpo-infra:k8s:KubeRayOperator",
        "grpo-infra:k8s:Kueue",
        "grpo-infra:k8s:GangQueues",
        "grpo-infra:k8s:GrpoRayJob",
        "grpo-infra:k8s:TenantAccess",
    } <= types
    for r in g.resources:
        if r.type.startswith("kubernetes:"):
            assert r.parent is not None, f"{r.urn} is not parented"
    assert _component(g, _rayjob(g, stack)).type == "grpo-infra:k8s:GrpoRayJob"
    for component in (r for r in g.resources if r.type.startswith("grpo-infra:k8s:")):
        assert component.outputs is not None, f"{component.urn} did not register_outputs"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_registered_objects_are_exactly_the_rendered_ones(stack: str) -> None:
    g, env = graph(stack), env_of(stack)
    job = _rayjob(g, stack).inputs
    assert job["spec"] == render.ray_job(env)["spec"]
    assert job["metadata"] == render.ray_job(env)["metadata"]
    for rendered in render.queue_objects(env):
        meta = rendered["metadata"]
        name = f"{meta['namespace']}-{meta['name']}" if "namespace" in meta else meta["name"]
        registered = g.named(f"kubernetes:{rendered['apiVersion']}:{rendered['kind']}", name).inputs
        assert {k: registered[k] for k in rendered} == rendered
    releases = {r.name: r.inputs for r in g.of_type(RELEASE)}
    for release in render.helm_releases(env):
        assert releases[release["name"]]["version"] == release["version"]
        assert releases[release["name"]]["chart"] == chart_path(release["chart"])
        assert releases[release["name"]]["values"] == release["values"]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_dependencies_let_destroy_run_in_order(stack: str) -> None:
    """RayJob → queues → Kueue release; RayJob → KubeRay release; everything scheduled → node pools."""
    g = graph(stack)
    job = _rayjob(g, stack)
    upstream = g.upstream(job.urn)
    kueue = g.named(RELEASE, "kueue").urn
    kuberay = g.named(RELEASE, "kuberay-operator").urn
    cluster_queues = [r.urn for r in g.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")]
    local_queues = [r.urn for r in g.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")]
    assert {kueue, kuberay, *cluster_queues, *local_queues} <= upstream
    for queue in local_queues:
        assert kueue in g.upstream(queue)
        assert set(cluster_queues) & g.upstream(queue)
    pool_resources = [r.urn for r in g.resources if r.type.startswith("grpo-infra:nodepools:")]
    pool_children = [c.urn for p in pool_resources for c in g.descendants(p) if c.custom]
    assert pool_children, "the stack registers its node pools"
    assert set(pool_children) <= upstream, "the RayJob must wait for (and be destroyed before) its nodes"
    secrets = [r.urn for r in g.of_type("kubernetes:core/v1:Secret")]
    assert set(secrets) <= upstream


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_suspend_is_left_to_kueue(stack: str) -> None:
    """Kueue flips spec.suspend on admission; a later `pulumi up` must not flip it back."""
    from components import kubernetes as components

    captured: list[object] = []
    original = components.register_object

    def spy(obj, opts):  # type: ignore[no-untyped-def]
        if obj["kind"] == "RayJob":
            captured.append(opts)
        return original(obj, opts)

    components.register_object = spy  # type: ignore[assignment]
    try:
        record(stack, ROOT)
    finally:
        components.register_object = original  # type: ignore[assignment]
    assert [o.ignore_changes for o in captured] == [["spec.suspend"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_secrets_are_pulumi_secrets_and_never_plaintext(stack: str) -> None:
    g, env = graph(stack), env_of(stack)
    assert g.plaintext_secrets == ()
    secrets = g.of_type("kubernetes:core/v1:Secret")
    # One per `secure:` value, and the job's Ray token (made once by the program, kept by ignore_changes).
    assert len(secrets) == len(env.job.secrets) + 1
    assert f"{env.job.name}-ray-token" in {s.inputs["metadata"]["name"] for s in secrets}
    for secret in secrets:
        assert secret.inputs["stringData"] == SECRET
        assert secret.inputs["metadata"]["namespace"] == env.job.tenant


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_stack_outputs(stack: str) -> None:
    g, env = graph(stack), env_of(stack)
    out = g.outputs
    assert out["namespaces"] == [t.name for t in env.tenants]
    assert out["localQueues"] == {t.name: t.queue for t in env.tenants}
    assert out["rayJob"] == f"{env.job.tenant}/{env.job.name}"
    assert out["dashboard"].startswith(f"kubectl -n {env.job.tenant} port-forward ")
    assert "8265:8265" in out["dashboard"]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_rayjob_waits_for_its_ray_token_secret(stack: str) -> None:
    g, env = graph(stack), env_of(stack)
    token = next(
        s for s in g.of_type("kubernetes:core/v1:Secret") if s.inputs["metadata"]["name"] == f"{env.job.name}-ray-token"
    )
    assert token.inputs["stringData"] == SECRET
    job = next(r for r in g.resources if r.type == "kubernetes:ray.io/v1:RayJob")
    # KubeRay reads the Secret when it creates the Ray pods; created first, deleted after the RayJob.
    assert token.urn in job.dependencies


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_rayjob_waits_for_its_network_policy(stack: str) -> None:
    """The Ray pods never start unfenced: the policy exists before the RayJob, and outlives it on destroy."""
    g, env = graph(stack), env_of(stack)
    policy = g.named("kubernetes:networking.k8s.io/v1:NetworkPolicy", f"{env.job.tenant}-{env.job.name}-ray")
    assert policy.urn in g.upstream(_rayjob(g, stack).urn)


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_destroy_removes_the_operators_before_the_node_pools(stack: str) -> None:
    """docs/kubernetes.md: `pulumi destroy` deletes the RayJob and queues, then the operators, then the pools.

    Destroy deletes a resource only after everything that depends on it: each operator's release must
    depend (transitively) on every resource that makes the pools' nodes.
    """
    g = graph(stack)
    pool_resources = [
        c.urn
        for r in g.resources
        if r.type.startswith("grpo-infra:nodepools:")
        for c in g.descendants(r.urn)
        if c.custom
    ]
    assert pool_resources
    for release in ("kueue", "kuberay-operator"):
        upstream = g.upstream(g.named(RELEASE, release).urn)
        missing = [u for u in pool_resources if u not in upstream]
        assert not missing, f"{release} can be destroyed after {missing[0]}"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_guard_program_is_registered_with_the_job_before_its_ray_object(stack: str) -> None:
    """Every Ray pod's init container mounts it: the Ray object waits for the ConfigMap (grpo_infra/k8s/shipped.py)."""
    g, env = graph(stack), env_of(stack)
    code = render.guard_config_map(env)
    meta = code["metadata"]
    registered = g.named("kubernetes:core/v1:ConfigMap", f"{meta['namespace']}-{meta['name']}")
    assert registered.inputs["data"] == code["data"] and registered.inputs["metadata"] == meta
    job = _rayjob(g, stack)
    assert registered.parent == job.parent and g[registered.parent].type == "grpo-infra:k8s:GrpoRayJob"
    assert registered.urn in g.upstream(job.urn)
    assert g[registered.parent].outputs["guardCode"] == meta["name"]
