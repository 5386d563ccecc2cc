"""What one job must not share with another, and what the tenant and the monitoring may reach: the checkpoint
directory (R6), the tenant's view of the job (R16), Ray's metrics port (R21), the head's loss (R7), the
submitter's and Kueue's pod sets (field reports)."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_infra import k8s as render
from grpo_infra.k8s.access import RAY_METRICS_PORT, ray_network_policy, tenant_access
from grpo_infra.k8s.kinds import gang_view
from grpo_infra.k8s.placement import parse_quantity
from grpo_infra.k8s.queues import HEAD_FLAVOR, cluster_queues, head_slots
from grpo_infra.spec import Environment

from .conftest import K8S_STACKS, env_of, variant


def _checkpoint_dirs(env: Environment) -> set[tuple[str, str, str]]:
    """(volume source, sub-directory, mount path) of the checkpoint directory in every pod of the job."""
    spec = render.ray_job(env)["spec"]["rayClusterSpec"]
    pods = [spec["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in spec["workerGroupSpecs"])]
    out = set()
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in pod["containers"][0]["volumeMounts"]:
            if mount["name"] == "checkpoints":
                source = repr(sorted((k, repr(v)) for k, v in volumes["checkpoints"].items() if k != "name"))
                out.add((source, mount.get("subPath", ""), mount["mountPath"]))
    return out


def _renamed(name: str) -> Any:
    def change(raw: dict[str, Any]) -> None:
        raw["job"]["name"] = name
        raw["job"]["experiment"] = name

    return change


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_two_jobs_on_the_same_claim_never_share_a_checkpoint_directory(stack: str) -> None:
    first, second = variant(stack, _renamed("grpo-first")), variant(stack, _renamed("grpo-second"))
    a, b = _checkpoint_dirs(first), _checkpoint_dirs(second)
    assert len(a) == 1 and len(b) == 1, "head and workers see one checkpoint directory"
    (source_a, sub_a, _), (source_b, sub_b, _) = a.pop(), b.pop()
    assert source_a == source_b, "the same claim (the namespace's default one)"
    assert (source_a, sub_a) != (source_b, sub_b), "two jobs must not resume from each other's checkpoints"


def _verbs(env: Environment, group: str, resource: str) -> set[str]:
    role = next(o for o in tenant_access(env) if o["kind"] == "Role" and o["metadata"]["namespace"] == env.job.tenant)
    return {
        verb
        for rule in role["rules"]
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_tenant_can_read_the_driver_log_and_the_events() -> None:
    """`kubectl logs job/<job>` gets the submitter Job first; Pending and eviction reasons are events."""
    env = env_of("eks-prod")
    assert {"get"} <= _verbs(env, "batch", "jobs")
    assert {"get", "list"} <= _verbs(env, "", "pods") and "get" in _verbs(env, "", "pods/log")
    assert {"list", "watch"} <= _verbs(env, "", "events")
    assert {"list"} <= _verbs(env, "events.k8s.io", "events")
    assert "create" not in _verbs(env, "batch", "jobs"), "reading, not running Jobs of its own"


def _scrape_ports(env: Environment) -> list[int]:
    """The ports the `monitoring` namespace may reach on the job's pods (one rule, every port listed)."""
    rules = ray_network_policy(env)["spec"]["ingress"]
    scrape = [
        r
        for r in rules
        if any(
            p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring"
            for p in r["from"]
        )
    ]
    assert scrape == [scrape[0]], "one rule for the monitoring namespace"
    assert {p["protocol"] for p in scrape[0]["ports"]} == {"TCP"}, "never an open rule (no ports: every port)"
    return [p["port"] for p in scrape[0]["ports"]]


def _monitored(raw: dict[str, Any]) -> None:
    raw["kubernetes"]["monitoringNamespace"] = "monitoring"


def test_the_monitoring_namespace_reaches_the_metrics_port_and_nothing_else() -> None:
    assert _scrape_ports(variant("eks-prod", _monitored)) == [RAY_METRICS_PORT]
    assert len(ray_network_policy(env_of("eks-prod"))["spec"]["ingress"]) == 1, "no monitoring rule unless asked"


def test_under_host_networking_the_monitoring_namespace_reaches_the_workers_metrics_port_of_the_job() -> None:
    """Host-network workers export metrics on the job's block (`--metrics-export-port`), the head on KubeRay's."""

    def host(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 40000}

    env = variant("eks-prod", _monitored, host)
    worker = render.ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]
    assert _scrape_ports(env) == sorted({RAY_METRICS_PORT, int(worker["metrics-export-port"])})


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_head_loss_ends_the_attempt_as_a_retryable_failure(stack: str) -> None:
    """The submitter's Job does not retry `ray job submit` against a lost head (KubeRay's default: 2)."""
    spec = render.ray_job(env_of(stack))["spec"]
    assert spec["submitterConfig"] == {"backoffLimit": 0}
    assert spec["backoffLimit"] >= 1, "the whole gang restarts from its checkpoint"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_no_working_dir_is_ever_uploaded(stack: str) -> None:
    """The job's code is in the image: no runtime_env (Ray's working_dir upload is capped, ray#55877)."""
    env = env_of(stack)
    assert "runtimeEnvYAML" not in render.ray_job(env)["spec"]


def _head_flavor_requests(obj: dict[str, Any]) -> dict[str, float]:
    """CPU and memory of the pod sets Kueue v0.19.2 places on the head flavor for one gang (every pod set but
    the workers: the head, with all its containers, and the submitter)."""
    view = gang_view(obj)
    cluster = view["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]]
    if "submitterPodTemplate" in view["spec"]:
        pods.append(view["spec"]["submitterPodTemplate"]["spec"])
    total: dict[str, float] = {"cpu": 0.0, "memory": 0.0}
    for pod in pods:
        for container in pod["containers"]:
            for resource in total:
                total[resource] += parse_quantity(container["resources"]["requests"][resource])
    return total


@pytest.mark.parametrize("kind", ["rayjob", "raycluster"])
@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_head_flavor_quota_is_what_the_rendered_head_pod_sets_ask_for(stack: str, kind: str) -> None:
    """Computed from what is rendered (the submitter, or the gate's container in a RayCluster's head), so a
    change of either cannot leave the quota short."""
    env = variant(stack, lambda raw: raw["job"].update(kind=kind))
    if env.kubernetes.scheduler != "kueue":
        pytest.skip("Volcano has no head flavor")
    need = _head_flavor_requests(render.workload(env))
    for tenant, queue in zip(env.tenants, cluster_queues(env), strict=True):
        flavor = next(f for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] == HEAD_FLAVOR)
        quota = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor["resources"]}
        slots = head_slots(env, tenant)
        for resource, amount in need.items():
            assert quota[resource] >= amount * slots - 1e-6, (tenant.name, resource)
