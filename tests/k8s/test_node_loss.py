"""Node loss on Kubernetes, on the rendered objects: disruption protection, fail-fast timeouts, the
whole-gang retry, and resume from the same checkpoint directory.

Expected values are written by hand from the stack files and from upstream defaults (KubeRay v1.7.0,
Kueue v1beta2, Ray's ray_config_def.h, verl 0.9.1's trainer keys), not computed by the renderers.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from grpo_infra import k8s as render
from grpo_infra.check import violations, warnings
from grpo_infra.k8s.kueue_config import manager_config
from grpo_infra.nodepools.gke import head_node_pool_args, node_pool_args
from grpo_infra.spec import Environment
from grpo_infra.validate.core import core_errors

from .conftest import K8S_STACKS, by_kind, env_of, variant, verl_job

JOB_LABEL = "grpo-infra/job"


def _pods(env: Environment) -> dict[str, dict[str, Any]]:
    """role → pod template (metadata and spec) of the rendered RayJob."""
    spec = render.ray_job(env)["spec"]
    first, *others = spec["rayClusterSpec"]["workerGroupSpecs"]
    return {
        "head": spec["rayClusterSpec"]["headGroupSpec"]["template"],
        "worker": first["template"],
        # A disaggregated job's other roles' groups (rollout, reward model).
        **{f"worker:{g['groupName']}": g["template"] for g in others},
        "submitter": spec["submitterPodTemplate"],
    }


def _env_vars(container: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}


# --- 1. disruption protection -------------------------------------------------------------------


# Head + one worker per node + submitter: eks-prod 4 nodes, gke-dev 2, onprem-k8s 3, local-k8s 3.
GANG_PODS = {"eks-prod": 6, "gke-dev": 4, "onprem-k8s": 5, "local-k8s": 5, "gke-disagg": 6}


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_one_budget_allows_no_voluntary_eviction_of_any_pod_of_the_gang(stack: str) -> None:
    env = env_of(stack)
    budgets = by_kind(render.objects(env), "PodDisruptionBudget")
    assert len(budgets) == 1
    pdb = budgets[0]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["namespace"] == env.job.tenant
    # Every pod must stay: minAvailable, since maxUnavailable needs a scale RayCluster and Job lack.
    assert pdb["spec"]["minAvailable"] == GANG_PODS[stack]
    assert "maxUnavailable" not in pdb["spec"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector == {JOB_LABEL: env.job.name}
    # Head, every worker and the submitter carry the selected label.
    for role, pod in _pods(env).items():
        assert selector.items() <= pod["metadata"]["labels"].items(), role
    assert core_errors(pdb) == []


def test_the_budget_does_not_select_another_jobs_pods() -> None:
    env = variant("eks-prod", lambda raw: raw["job"].update(name="other-run"))
    pdb = render.pod_disruption_budget(env)
    ours = _pods(env_of("eks-prod"))["worker"]["metadata"]["labels"]
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= ours.items()


def test_the_budget_exists_before_the_rayjob_in_pulumi() -> None:
    from grpo_infra.pulumi_graph import record
    from tests.conftest import ROOT

    g = record("eks-prod", ROOT)
    env = env_of("eks-prod")
    pdb = g.named("kubernetes:policy/v1:PodDisruptionBudget", f"{env.job.tenant}-{env.job.name}-gang")
    job = g.named("kubernetes:ray.io/v1:RayJob", f"{env.job.tenant}-{env.job.name}")
    assert pdb.urn in g.upstream(job.urn)
    assert pdb.inputs["spec"] == {"minAvailable": 6, "selector": {"matchLabels": {JOB_LABEL: env.job.name}}}


def test_eks_pods_tell_karpenter_not_to_disrupt_their_nodes() -> None:
    for role, pod in _pods(env_of("eks-prod")).items():
        assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true", role


@pytest.mark.parametrize("stack", ["gke-dev", "onprem-k8s", "local-k8s"])
def test_no_karpenter_annotation_off_eks(stack: str) -> None:
    for pod in _pods(env_of(stack)).values():
        assert "karpenter.sh/do-not-disrupt" not in pod["metadata"].get("annotations", {})


def test_gke_pools_are_never_upgraded_under_a_run() -> None:
    env = env_of("gke-dev")
    for pool in env.pools:
        assert node_pool_args(env, pool)["management"] == {"auto_upgrade": False, "auto_repair": True}
    assert head_node_pool_args(env)["management"] == {"auto_upgrade": False, "auto_repair": True}


# --- 2. fail fast, retry whole, resume -----------------------------------------------------------


def test_ray_declares_a_silent_node_dead_after_a_minute_by_default() -> None:
    pods = _pods(env_of("eks-prod"))
    for role in ("head", "worker"):
        values = _env_vars(pods[role]["spec"]["containers"][0])
        # 12 missed checks, one every 5 s, each waiting at most 5 s: 60 s (Ray's own: 5 × 3 s, 10 s timeout).
        assert values["RAY_health_check_failure_threshold"] == "12", role
        assert values["RAY_health_check_period_ms"] == "5000", role
        assert values["RAY_health_check_timeout_ms"] == "5000", role


def test_detection_follows_the_spec() -> None:
    env = variant("eks-prod", lambda raw: raw["kubernetes"]["rayJob"].update(nodeLoss={"detectSeconds": 30}))
    head = _pods(env)["head"]["spec"]["containers"][0]
    assert _env_vars(head)["RAY_health_check_failure_threshold"] == "6"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_a_submitter_that_stops_hearing_the_head_fails_after_the_detection_window(stack: str) -> None:
    """KubeRay v1.6.2 ends an attempt only when the submitter Job fails: the submitter's own liveness probe
    of the head's GCS, restartPolicy Never and a Job that allows no second try make a lost head a failed
    attempt in `detectSeconds` (60 s by default), as Ray makes a lost worker one."""
    env = env_of(stack)
    spec = render.ray_job(env)["spec"]
    assert spec["submitterConfig"] == {"backoffLimit": 0}
    pod = spec["submitterPodTemplate"]["spec"]
    assert pod["restartPolicy"] == "Never"
    probe = pod["containers"][0]["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 60
    assert probe["exec"]["command"][:2] == ["python3", "-c"] and "/api/gcs_healthz" in probe["exec"]["command"][2]


def test_the_submitter_keeps_away_from_its_heads_node_when_it_can() -> None:
    """A submitter on the head's node dies with it and can never fail the attempt: preferred (a one-node
    head pool still takes both) anti-affinity to this job's head, per node."""
    env = env_of("eks-prod")
    pod = render.ray_job(env)["spec"]["submitterPodTemplate"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector == {JOB_LABEL: env.job.name, "ray.io/node-type": "head"}
    head = _pods(env)["head"]["metadata"]["labels"]
    assert head[JOB_LABEL] == env.job.name  # KubeRay adds ray.io/node-type=head to the head pod itself
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]


def test_the_submitters_detection_follows_the_spec() -> None:
    env = variant("eks-prod", lambda raw: raw["kubernetes"]["rayJob"].update(nodeLoss={"detectSeconds": 30}))
    probe = render.ray_job(env)["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["livenessProbe"]
    assert probe["failureThreshold"] == 6


def test_detection_must_be_whole_health_check_periods() -> None:
    with pytest.raises(ValidationError, match="multiple of 5"):
        variant("eks-prod", lambda raw: raw["kubernetes"]["rayJob"].update(nodeLoss={"detectSeconds": 42}))


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_a_wedged_raylet_is_restarted_after_five_minutes(stack: str) -> None:
    pods = _pods(env_of(stack))
    for role in ("head", "worker"):
        container = pods[role]["spec"]["containers"][0]
        live, ready = container["livenessProbe"], container["readinessProbe"]
        # Ray 2.60 (>= 2.53): the dashboard agent's /api/healthz, as KubeRay v1.7.0 would probe it.
        assert live["httpGet"] == {"path": "/api/healthz", "port": 52365}, role
        assert (live["periodSeconds"], live["failureThreshold"]) == (5, 60), role  # 300 s
        # Readiness: KubeRay's defaults (constant.go:305-313), a flag, never a restart.
        assert (ready["periodSeconds"], ready["failureThreshold"], ready["initialDelaySeconds"]) == (5, 10, 10)
        if role == "worker":
            assert ready["httpGet"] == {"path": "/api/healthz", "port": 52365}
        else:  # and its dashboard too: tests/k8s/test_head_readiness.py
            assert "http://localhost:8265/api/gcs_healthz" in ready["exec"]["command"][2]
    head = pods["head"]["spec"]["containers"][0]
    worker = pods["worker"]["spec"]["containers"][0]
    assert (head["livenessProbe"]["timeoutSeconds"], worker["livenessProbe"]["timeoutSeconds"]) == (5, 2)


def test_liveness_window_follows_the_spec() -> None:
    env = variant("gke-dev", lambda raw: raw["kubernetes"]["rayJob"].update(nodeLoss={"livenessSeconds": 120}))
    worker = _pods(env)["worker"]["spec"]["containers"][0]
    assert worker["livenessProbe"]["failureThreshold"] == 24


def test_ray_before_2_53_is_probed_with_kuberays_wget_commands() -> None:
    env = variant("gke-dev", lambda raw: raw["image"]["contents"].update(ray="2.52.0"))
    pods = _pods(env)
    worker = pods["worker"]["spec"]["containers"][0]["livenessProbe"]
    head = pods["head"]["spec"]["containers"][0]["livenessProbe"]
    assert "httpGet" not in worker
    assert worker["exec"]["command"] == [
        "bash",
        "-c",
        "wget --tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz | grep success",
    ]
    assert head["exec"]["command"][2].endswith("http://localhost:8265/api/gcs_healthz | grep success")


def test_host_networked_workers_are_probed_on_their_own_agent_port() -> None:
    def host(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 30000}

    env = variant("onprem-k8s", host)
    group = render.ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    port = int(group["rayStartParams"]["dashboard-agent-listen-port"])
    assert port != 52365
    assert group["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] == port


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_a_failed_attempt_gets_three_new_ray_clusters(stack: str) -> None:
    assert render.ray_job(env_of(stack))["spec"]["backoffLimit"] == 3


def test_backoff_limit_follows_the_spec() -> None:
    env = variant("eks-prod", lambda raw: raw["kubernetes"]["rayJob"].update(backoffLimit=0))
    assert render.ray_job(env)["spec"]["backoffLimit"] == 0


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_kueue_waits_a_node_replacement_and_an_image_pull_before_evicting(stack: str) -> None:
    """Unset, recoveryTimeout is nodeReplacementMinutes + imagePullMinutes (10 + 10): the 15 minutes it was
    evicted a retry whose replacement node was still pulling the image."""
    assert manager_config(env_of(stack))["waitForPodsReady"]["recoveryTimeout"] == "20m"


def test_recovery_timeout_follows_the_spec() -> None:
    env = variant("gke-dev", lambda raw: raw["kubernetes"].update(recoveryTimeoutMinutes=45))
    assert manager_config(env)["waitForPodsReady"]["recoveryTimeout"] == "45m"


def test_recovery_timeout_is_derived_from_replacement_and_pull() -> None:
    env = variant("eks-prod", lambda raw: raw["kubernetes"].update(nodeReplacementMinutes=4, imagePullMinutes=3))
    assert manager_config(env)["waitForPodsReady"]["recoveryTimeout"] == "7m"


def test_a_recovery_timeout_shorter_than_replacement_and_pull_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"recoveryTimeoutMinutes 15 is shorter than .*\(20\)") as caught:
        variant("gke-dev", lambda raw: raw["kubernetes"].update(recoveryTimeoutMinutes=15))
    assert len(caught.value.errors()) == 1


CHECKPOINT_DIRS = {
    "eks-prod": "/checkpoints/qwen25-7b-math",
    "gke-dev": "/checkpoints/qwen25-3b-gsm8k",
    "onprem-k8s": "/checkpoints/llama31-8b-gsm8k",
    "local-k8s": "/checkpoints/qwen25-05b-gsm8k",
    "gke-disagg": "/checkpoints/qwen25-3b-gsm8k-disagg",
}


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_every_attempt_resumes_from_the_same_checkpoint_volume(stack: str) -> None:
    """The entrypoint is fixed in the RayJob, so every new Ray cluster runs verl with the same resume keys."""
    env = verl_job(stack)
    job = render.ray_job(env)
    entrypoint = job["spec"]["entrypoint"]
    directory = CHECKPOINT_DIRS[stack]
    assert "trainer.resume_mode=auto" in entrypoint
    assert f"trainer.default_local_dir={directory}" in entrypoint
    pods = _pods(env)
    sources = []
    for role in [r for r in pods if r != "submitter"]:  # the head and every worker group
        pod = pods[role]["spec"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["checkpoints"] == directory, role
        sources.append(next(v for v in pod["volumes"] if v["name"] == "checkpoints"))
    assert all(s == sources[0] for s in sources)


# --- 4. checkpoint storage -----------------------------------------------------------------------


def _hostpath_checkpoints(shared: bool) -> Any:
    def change(raw: dict[str, Any]) -> None:
        volume: dict[str, Any] = {"hostPath": "/var/lib/grpo-checkpoints"}
        if shared:
            volume["hostPathShared"] = True
        raw["job"]["checkpoint"]["volume"] = volume

    return change


def test_check_refuses_a_multi_node_gang_checkpointing_to_each_nodes_own_disk() -> None:
    env = variant("onprem-k8s", _hostpath_checkpoints(shared=False))
    found = [v for v in violations(env) if v.rule == "checkpoint-shared"]
    assert [v.where for v in found] == ["grpo-infra:environment.job.checkpoint.volume"]
    assert "/var/lib/grpo-checkpoints" in found[0].message and "3-node gang" in found[0].message


def test_a_host_path_declared_shared_is_accepted() -> None:
    env = variant("onprem-k8s", _hostpath_checkpoints(shared=True))
    assert [v for v in violations(env) if v.rule == "checkpoint-shared"] == []


def test_a_one_node_gang_may_checkpoint_to_its_own_disk() -> None:
    def one_node(raw: dict[str, Any]) -> None:
        _hostpath_checkpoints(shared=False)(raw)
        raw["job"]["nodes"] = 1

    assert [v for v in violations(variant("onprem-k8s", one_node)) if v.rule == "checkpoint-shared"] == []


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_shipped_stacks_checkpoint_to_shared_storage(stack: str) -> None:
    assert [v for v in violations(env_of(stack)) if v.rule == "checkpoint-shared"] == []


@pytest.mark.parametrize("url", ["s3://grpo/ckpt", "gs://grpo/ckpt", "hdfs://nn/ckpt"])
def test_a_bucket_url_is_refused_naming_verls_posix_key(url: str) -> None:
    with pytest.raises(ValidationError, match=r"trainer\.default_local_dir") as info:
        variant("eks-prod", lambda raw: raw["job"]["checkpoint"].update(dir=url))
    assert "claimName" in str(info.value)


def test_host_path_shared_only_describes_a_host_path() -> None:
    with pytest.raises(ValidationError, match="hostPathShared"):
        variant("eks-prod", lambda raw: raw["job"]["checkpoint"]["volume"].update(hostPathShared=True))


def _head_pool(nodes: int) -> Any:
    def change(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["headPool"] = {"nodes": nodes, "cpus": 16, "memoryGib": 64, "labels": {"role": "ray-head"}}

    return change


def test_one_head_node_on_an_existing_cluster_is_warned_of_and_never_refused() -> None:
    one = variant("onprem-k8s", _head_pool(1))
    assert [(w.rule, w.where) for w in warnings(one) if w.rule != "image-engine-transformers"] == [
        ("head-pool-one-node", "grpo-infra:environment.kubernetes.headPool.nodes")
    ]
    assert "out-of-service" in warnings(one)[0].message
    assert "head-pool-one-node" not in [v.rule for v in violations(one)]
    # Two head nodes keep the submitter off its head's node; a cloud deletes a lost instance's node itself.
    assert [w.rule for w in warnings(variant("onprem-k8s", _head_pool(2)))] == ["image-engine-transformers"]
    assert warnings(env_of("eks-prod")) == []
    # A RayCluster has no submitter to fail: nothing to warn of.
    interactive = variant("onprem-k8s", _head_pool(1), lambda raw: raw["job"].update(kind="raycluster"))
    assert "head-pool-one-node" not in [w.rule for w in warnings(interactive)]
