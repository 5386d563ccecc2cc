"""The GRPO RayJob: verl's own command line, a gang shaped by the pool, admission-ready flags."""

from __future__ import annotations

import shlex

import pytest
import yaml
from typer.testing import CliRunner

from grpo_infra import verl
from grpo_infra.cli import app
from grpo_infra.k8s import objects, ray_job
from grpo_infra.k8s.placement import parse_quantity
from grpo_infra.k8s.queues import cluster_queues
from tests.conftest import ROOT

from .conftest import K8S_STACKS, by_kind, env_of, variant, verl_job
from .entrypoints import verl_argv


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_entrypoint_ends_in_verls_command_from_verl_py(stack: str) -> None:
    env = verl_job(stack)
    job = ray_job(env)
    argv = verl_argv(job["spec"]["entrypoint"])
    assert argv == shlex.split(verl.shell_command(env))
    assert argv[:3] == list(verl.entrypoint(env))
    assert argv[:3] == ["python3", "-m", verl.FULLY_ASYNC_MODULE if env.disaggregated else "verl.trainer.main_ppo"]
    assert "algorithm.adv_estimator=grpo" in argv


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_trainer_shape_equals_the_worker_groups(stack: str) -> None:
    """verl's nodes and GPUs per node of each role are its worker group's: the one group of a colocated
    job is the trainer's; a disaggregated job's groups are named after their roles."""
    env = verl_job(stack)
    job = ray_job(env)
    overrides = dict(a.split("=", 1) for a in verl_argv(job["spec"]["entrypoint"])[3:])
    groups = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    resource = {r.group_name: r.pool.gpu.resource for r in env.role_gangs()}
    prefix = {"trainer": "trainer", "rollout": "rollout", "reward-model": "reward.reward_model"}
    for group in groups:
        key = prefix[group["groupName"]] if env.disaggregated else "trainer"
        gpu = resource.get(group["groupName"], env.gang.pool.gpu.resource)
        per_pod = int(group["template"]["spec"]["containers"][0]["resources"]["limits"][gpu])
        assert int(overrides[f"{key}.nnodes"]) == group["replicas"] * group["numOfHosts"], group["groupName"]
        assert int(overrides[f"{key}.n_gpus_per_node"]) == per_pod, group["groupName"]
    assert len(groups) == (len(env.role_gangs()) if env.disaggregated else 1)


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_gang_flags_and_labels(stack: str) -> None:
    env = env_of(stack)
    job = ray_job(env)
    spec, cluster = job["spec"], job["spec"]["rayClusterSpec"]
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == env.tenant(env.job.tenant).queue
    assert labels["kueue.x-k8s.io/priority-class"] == env.kubernetes.ray_job.priority_class
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] > 0 and spec["backoffLimit"] >= 0 and spec["activeDeadlineSeconds"] > 0
    assert cluster["enableInTreeAutoscaling"] is False
    assert "clusterSelector" not in spec
    for group in cluster["workerGroupSpecs"]:
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == env.gang.nodes
        assert group["groupName"] not in ("head", "submitter")
    assert len(job["metadata"]["name"]) <= 47


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_workers_are_placed_on_the_pool_with_fabric_and_shm(stack: str) -> None:
    env = env_of(stack)
    pool = env.gang.pool
    worker = ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"] == pool.labels
    assert {(t["key"], t.get("value"), t["effect"]) for t in worker["tolerations"]} == {
        (t.key, t.value, t.effect) for t in pool.taints
    }
    container = worker["containers"][0]
    limits = container["resources"]["limits"]
    assert limits[pool.gpu.resource] == str(pool.gpu.per_node)
    if pool.fabric.resource:
        assert limits[pool.fabric.resource] == str(pool.fabric.devices_per_node)
    shm = next(v for v in worker["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # Every shipped stack mounts its models and data read-only at /models and /data.
    assert mounts == {"dshm": "/dev/shm", "checkpoints": env.job.checkpoint.dir, "models": "/models", "data": "/data"}
    names = {e["name"] for e in container["env"]}
    expected = {"efa": "FI_PROVIDER", "roce": "NCCL_IB_HCA", "infiniband": "NCCL_IB_HCA", "none": "NCCL_IB_DISABLE"}
    assert expected[pool.fabric.kind] in names


def test_secrets_come_from_secret_key_refs_only() -> None:
    env = env_of("eks-prod")
    job = ray_job(env)
    for container in [
        job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0],
        job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0],
    ]:
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
        assert set(refs) == {"WANDB_API_KEY", "HF_TOKEN"}
        assert refs["WANDB_API_KEY"] == {"name": "grpo-wandb-api-key", "key": "value"}
    assert not by_kind(objects(env), "Secret"), "Secrets with data are Pulumi's, never rendered"


def test_synth_writes_secret_references_and_no_secret_objects(tmp_path) -> None:
    result = CliRunner().invoke(app, ["synth", "eks-prod", "--root", str(ROOT), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    tree = tmp_path / "eks-prod"
    refs = yaml.safe_load((tree / "kubernetes" / "secret-references.yaml").read_text())
    assert {r["name"] for r in refs["secrets"]} == {"grpo-wandb-api-key", "grpo-hf-token"}
    assert not list(tree.glob("kubernetes/secret.*"))
    assert (tree / "helm" / "kueue.yaml").is_file() and (tree / "helm" / "kuberay-operator.yaml").is_file()
    release = yaml.safe_load((tree / "helm" / "kueue.yaml").read_text())
    assert set(release) == {"chart", "repository", "version", "namespace", "values"}


def test_ray_head_is_cluster_internal() -> None:
    env = env_of("onprem-k8s")
    rendered = objects(env)
    head = ray_job(env)["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    assert "enableIngress" not in head
    # On the head pool's CPU nodes, off the tainted GPU nodes: it tolerates nothing.
    assert env.kubernetes is not None and env.kubernetes.head_pool is not None
    assert head["template"]["spec"]["nodeSelector"] == env.kubernetes.head_pool.labels
    assert "tolerations" not in head["template"]["spec"]
    policy = by_kind(rendered, "NetworkPolicy")[0]
    assert policy["metadata"]["namespace"] == env.job.tenant
    assert policy["spec"]["podSelector"]["matchLabels"] == {"grpo-infra/job": env.job.name}


def test_a_pool_change_moves_flavor_tolerations_and_quota_together() -> None:
    def change(raw: dict) -> None:
        pool = raw["pools"][0]
        pool["taints"] = [{"key": "example.com/gpu-node", "value": "yes", "effect": "NoSchedule"}]
        pool["cpus"] = 96

    env = variant("onprem-k8s", change)
    rendered = objects(env)
    flavor = next(f for f in by_kind(rendered, "ResourceFlavor") if f["metadata"]["name"] == "h100-roce")
    assert flavor["spec"]["nodeTaints"] == [{"key": "example.com/gpu-node", "effect": "NoSchedule", "value": "yes"}]
    worker = by_kind(rendered, "RayJob")[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["tolerations"][0]["key"] == "example.com/gpu-node"
    queue = next(q for q in cluster_queues(env) if q["metadata"]["name"] == "grpo-rl-team")
    cpu = next(r for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "cpu")
    # 24 GPUs = 3 nodes of (96 - 8 reserved - 0.05 for the RDMA device plugin the stack installs) CPUs.
    assert parse_quantity(cpu["nominalQuota"]) == pytest.approx(3 * (96 - 8 - 0.05))
