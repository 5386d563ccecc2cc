"""`job.kind`: a RayJob, a RayCluster or a RayCronJob from one Ray cluster builder, each accepted by the pinned
CRDs, admitted through the tenant's queue, and refused by `check` where KubeRay or Kueue would misbehave."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_infra import k8s as render
from grpo_infra.check import violations, warnings
from grpo_infra.k8s import raycronjob
from grpo_infra.k8s.gate import GATE_CONTAINER, GATE_VOLUME
from grpo_infra.k8s.kinds import gang_view
from grpo_infra.k8s.operators import kuberay_release
from grpo_infra.k8s.raycluster import MAX_EXEC_TIME_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from grpo_infra.k8s.raycronjob import DEFAULT_LOCAL_QUEUE
from grpo_infra.k8s.rayjob import ray_job_spec
from grpo_infra.pulumi_graph import record
from grpo_infra.spec import Environment, SpecError, load_stack
from grpo_infra.validate import validate_objects
from tests.conftest import ROOT

from .conftest import K8S_STACKS, by_kind, env_of, variant, verl_job, without_stand_ins


def as_kind(kind: str, **cluster: Any) -> Any:
    def change(raw: dict[str, Any]) -> None:
        raw["job"]["kind"] = kind
        if kind == "raycronjob":
            raw["kubernetes"]["rayCronJob"] = {"schedule": "0 2 * * *", **cluster}
            raw["job"]["checkpoint"]["resume"] = "disable"
        elif cluster:
            raw["kubernetes"]["rayCluster"] = cluster

    return change


def _head(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["headGroupSpec"]["template"]["spec"]


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_every_kind_carries_the_one_builders_ray_cluster(stack: str) -> None:
    """No second copy: the RayCluster's spec is the RayJob's `rayClusterSpec` plus `suspend` and the gate's
    container beside the head; the RayCronJob's template is the RayJob's spec itself."""
    job = render.ray_job(verl_job(stack))
    cluster = render.ray_cluster(variant(stack, without_stand_ins, as_kind("raycluster")))
    cron = render.ray_cron_job(variant(stack, without_stand_ins, as_kind("raycronjob")))
    expected = copy.deepcopy(job["spec"]["rayClusterSpec"])
    got = copy.deepcopy(cluster["spec"])
    assert got.pop("suspend") is True
    containers = _head(got)["containers"]
    assert [c["name"] for c in containers] == ["ray-head", GATE_CONTAINER]
    containers.pop()
    assert got == expected
    template = cron["spec"]["jobTemplate"]
    resumed = variant(stack, without_stand_ins, lambda raw: raw["job"]["checkpoint"].update(resume="disable"))
    assert template == ray_job_spec(resumed)


@pytest.mark.parametrize("kind", ["raycluster", "raycronjob"])
@pytest.mark.parametrize("stack", K8S_STACKS)
def test_each_kind_validates_against_the_pinned_crds_and_is_feasible(stack: str, kind: str) -> None:
    env = variant(stack, as_kind(kind))
    rendered = render.objects(env)
    assert validate_objects(rendered) == []
    assert violations(env) == [], [v.line() for v in violations(env)]


def test_a_misspelled_field_of_the_new_kinds_is_caught_by_the_schema() -> None:
    for kind, path in (("raycluster", ("spec",)), ("raycronjob", ("spec",))):
        obj = render.workload(variant("eks-prod", as_kind(kind)))
        broken = copy.deepcopy(obj)
        target = broken
        for key in path:
            target = target[key]
        target["shedule" if kind == "raycronjob" else "suspnd"] = True
        assert validate_objects([broken]), kind


def test_the_raycluster_is_admitted_through_the_tenants_queue_with_a_bounded_lifetime() -> None:
    env = variant("eks-prod", as_kind("raycluster"))
    cluster = render.ray_cluster(env)
    labels = cluster["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == env.tenant(env.job.tenant).queue
    assert labels[PRIORITY_LABEL] == env.kubernetes.ray_job.priority_class
    assert labels[MAX_EXEC_TIME_LABEL] == str(24 * 3600), "bounded by default: 24 h"
    eight = render.ray_cluster(variant("eks-prod", as_kind("raycluster", maxExecutionHours=8)))
    assert eight["metadata"]["labels"][MAX_EXEC_TIME_LABEL] == "28800"
    forever = render.ray_cluster(variant("eks-prod", as_kind("raycluster", maxExecutionHours="forever")))
    assert MAX_EXEC_TIME_LABEL not in forever["metadata"]["labels"], "unbounded only when the stack says forever"


def test_the_raycluster_gate_runs_once_beside_the_head_and_holds_readiness() -> None:
    env = variant("eks-prod", as_kind("raycluster"))
    head = _head(render.ray_cluster(env)["spec"])
    gate = next(c for c in head["containers"] if c["name"] == GATE_CONTAINER)
    script = gate["command"][-1]
    assert "ray job submit" in script and "touch" in script
    assert gate["readinessProbe"]["exec"]["command"][:2] == ["test", "-f"], "Ready only once the gate passed"
    token = next(e for e in gate["env"] if e["name"] == "RAY_AUTH_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["key"] == "auth_token", "the token by reference, never a value"
    assert GATE_VOLUME in {v["name"] for v in head["volumes"]}

    off = variant(
        "eks-prod", as_kind("raycluster"), lambda raw: raw["job"]["preflight"].update(nccl={"enabled": False})
    )
    assert [c["name"] for c in _head(render.ray_cluster(off)["spec"])["containers"]] == ["ray-head"]


def test_a_raycluster_has_no_submitter_and_its_budget_counts_head_and_workers() -> None:
    env = variant("eks-prod", as_kind("raycluster"))
    budget = render.pod_disruption_budget(env)
    assert budget["spec"]["minAvailable"] == 1 + env.gang.nodes
    assert render.pod_disruption_budget(env_of("eks-prod"))["spec"]["minAvailable"] == 2 + env.gang.nodes


def test_the_raycronjobs_runs_are_admitted_through_a_default_queue_leading_to_the_tenants_clusterqueue() -> None:
    env = variant("eks-prod", as_kind("raycronjob", timeZone="Europe/Paris"))
    rendered = render.objects(env)
    [cron] = by_kind(rendered, "RayCronJob")
    assert cron["spec"]["schedule"] == "0 2 * * *" and cron["spec"]["timeZone"] == "Europe/Paris"
    queues = {
        q["metadata"]["name"]: q
        for q in by_kind(rendered, "LocalQueue")
        if q["metadata"]["namespace"] == env.job.tenant
    }
    tenant = env.tenant(env.job.tenant)
    assert queues[DEFAULT_LOCAL_QUEUE]["spec"] == queues[tenant.queue]["spec"], "the same ClusterQueue, the same quota"
    assert gang_view(cron)["metadata"]["labels"][QUEUE_LABEL] == DEFAULT_LOCAL_QUEUE
    gates = {g["name"]: g["enabled"] for g in kuberay_release(env)["values"]["featureGates"]}
    assert gates["RayCronJob"] is True and gates["RayClusterStatusConditions"] is True
    assert "featureGates" not in kuberay_release(env_of("eks-prod"))["values"], "the chart's own gates otherwise"


def _rules(env: Environment) -> set[str]:
    return {v.rule for v in violations(env)}


def test_check_refuses_what_kuberay_or_kueue_would_run_badly() -> None:
    cron = as_kind("raycronjob")
    assert "raycronjob-concurrency" in _rules(variant("eks-prod", as_kind("raycronjob", concurrencyPolicy="Forbid")))
    assert "raycronjob-resume" in _rules(
        variant("eks-prod", cron, lambda raw: raw["job"]["checkpoint"].update(resume="auto"))
    )
    no_schedule = variant("eks-prod", cron, lambda raw: raw["kubernetes"].pop("rayCronJob"))
    assert _rules(no_schedule) == {"raycronjob-schedule"}
    short = variant("eks-prod", as_kind("raycluster", maxExecutionHours=0.5))
    assert "raycluster-lifetime" in _rules(short), "45 min to become Ready, 30 min of life"
    volcano = variant("eks-prod", as_kind("raycronjob"), lambda raw: raw["kubernetes"].update(scheduler="volcano"))
    assert "raycronjob-scheduler" in _rules(volcano)
    slurm = env_of("onprem-slurm").model_dump(by_alias=True, exclude_none=True)
    slurm["job"]["kind"] = "raycluster"
    assert "job-kind-target" in _rules(Environment.model_validate(slurm))


def test_check_refuses_a_raycluster_larger_than_the_tenants_quota() -> None:
    def small_quota(raw: dict[str, Any]) -> None:
        raw["tenants"][0]["gpuQuota"] = 8

    for kind in ("raycluster", "raycronjob"):
        env = variant("eks-prod", as_kind(kind), small_quota)
        assert "kueue-admission" in _rules(env), kind


@pytest.mark.parametrize(("kind", "limit"), [("rayjob", 47), ("raycluster", 53), ("raycronjob", 36)])
def test_names_are_bounded_per_kind_as_kuberay_bounds_them(kind: str, limit: int) -> None:
    def named(length: int) -> Any:
        def change(raw: dict[str, Any]) -> None:
            raw["job"]["name"] = "g" * length

        return change

    fits = variant("eks-prod", as_kind(kind), named(limit))
    assert render.workload(fits)["metadata"]["name"] == "g" * limit
    with pytest.raises((SpecError, ValueError), match=f"at most {limit} characters"):
        variant("eks-prod", as_kind(kind), named(limit + 1))


@pytest.mark.parametrize(
    "schedule",
    ["0 2 * *", "0 24 * * *", "61 * * * *", "TZ=UTC 0 2 * * *", "0 2 * * */0", "every day"],
)
def test_a_schedule_kuberay_would_not_parse_is_refused(schedule: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        variant("eks-prod", as_kind("raycronjob", schedule=schedule))


def test_a_time_zone_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="timeZone"):
        variant("eks-prod", as_kind("raycronjob", timeZone="Mars/Olympus"))


@pytest.mark.parametrize("kind", ["raycluster", "raycronjob"])
def test_the_pulumi_program_registers_the_kinds_object_in_the_jobs_component(kind: str, tmp_path: Path) -> None:
    """One component for every kind, so switching kinds replaces the Ray object and nothing else."""
    (tmp_path / "stacks").mkdir()
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.onprem-k8s.yaml").read_text())
    as_kind(kind)(document["config"]["grpo-infra:environment"])
    (tmp_path / "stacks" / "Pulumi.onprem-k8s.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    g = record("onprem-k8s", tmp_path)
    env = load_stack("onprem-k8s", tmp_path).environment
    kind_type = {"raycluster": "RayCluster", "raycronjob": "RayCronJob"}[kind]
    obj = g.named(f"kubernetes:ray.io/v1:{kind_type}", f"{env.job.tenant}-{env.job.name}")
    assert obj.inputs["spec"] == render.workload(env)["spec"]
    assert g[obj.parent].type == "grpo-infra:k8s:GrpoRayJob"
    assert not g.of_type("kubernetes:ray.io/v1:RayJob"), "no RayJob beside it"
    output = {"raycluster": "rayCluster", "raycronjob": "rayCronJob"}[kind]
    assert g.outputs[output] == f"{env.job.tenant}/{env.job.name}"
    if kind == "raycronjob":
        names = [q.inputs["metadata"]["name"] for q in g.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")]
        assert DEFAULT_LOCAL_QUEUE in names


def test_a_raycronjob_on_kuberay_1_6_names_each_run_by_its_tick_and_is_warned_of_the_kubernetes_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cron = variant("eks-prod", as_kind("raycronjob"))
    [warning] = [w for w in warnings(cron) if w.rule == "raycronjob-tick-names"]
    assert "kuberay#4849" in warning.message and "1.36" in warning.message
    assert "raycronjob-tick-names" not in _rules(cron)
    assert not [w for w in warnings(env_of("eks-prod")) if w.rule == "raycronjob-tick-names"], "rayjob runs once"
    policy, binding = render.tick_name_policy(cron)
    assert [policy["kind"], binding["kind"]] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert {o["metadata"]["name"] for o in render.objects(cron)} >= {policy["metadata"]["name"]}
    assert not [o for o in render.objects(env_of("eks-prod")) if o["kind"] == "MutatingAdmissionPolicy"]
    monkeypatch.setattr(raycronjob, "KUBERAY_VERSION", "1.7.0")
    assert not [w for w in warnings(cron) if w.rule == "raycronjob-tick-names"], "named by the tick from 1.7.0"
    assert render.tick_name_policy(cron) == [], "KubeRay names the runs itself from 1.7.0"
