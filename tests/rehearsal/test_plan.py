"""What a rehearsal changes in a stack, and what it never changes: every constraint the cloud would hold
the stack to (labels, taints, GPUs and fabric devices per node, the gang's pool, the guard's node facts)
stays; what cannot be here is substituted and said; CPU and memory scale so a pod fits a local node exactly
when it fits the cloud's."""

from __future__ import annotations

import copy

import pytest
import yaml

from grpo_infra import k8s as render
from grpo_infra.image.variant import runtime_guard_args
from grpo_infra.k8s.allocatable import pool_allocatable
from grpo_infra.k8s.placement import node_share, parse_quantity
from grpo_infra.kube.nodes import real_nodes
from grpo_infra.rehearsal.plan import HOST_ROOT, MAX_GPU_NODES, rehearsal
from grpo_infra.rehearsal.run import THROWAWAY, secret_settings, stack_file
from grpo_infra.rehearsal.scale import HEAD, factors, pod_pool, scale_object
from grpo_infra.spec import Environment, load_stack

from ..conftest import ROOT

STACKS = ["eks-prod", "gke-dev", "onprem-k8s", "local-k8s"]
LOCAL = (2000, 24005)


def planned(stack: str):
    return rehearsal(stack, load_stack(stack, ROOT).environment)


@pytest.mark.parametrize("stack", STACKS)
def test_no_constraint_is_dropped_only_the_node_counts_shrink(stack: str) -> None:
    env = load_stack(stack, ROOT).environment
    r = planned(stack)
    for before, after in zip(env.pools, r.env.pools, strict=True):
        assert (after.labels, after.taints, after.gpu, after.fabric) == (
            before.labels,
            before.taints,
            before.gpu,
            before.fabric,
        )
        assert after.node_count == min(before.node_count, MAX_GPU_NODES)
    assert r.env.job.pool == env.job.pool
    assert r.env.kubernetes.head_pool == env.kubernetes.head_pool
    assert r.env.kubernetes.topology == env.kubernetes.topology
    # The workers' guard still holds the GPU nodes to the declared image's driver floor and HCAs.
    worker = runtime_guard_args(r.env)
    declared = runtime_guard_args(env)
    for fact in ("--min-driver", "--hca"):
        assert [a for i, a in enumerate(declared) if declared[i - 1] == fact] == [
            a for i, a in enumerate(worker) if worker[i - 1] == fact
        ]
    assert "--min-driver" not in runtime_guard_args(r.env, gpu_node=False)


def test_every_substitution_is_said() -> None:
    lines = [s.line() for s in planned("eks-prod").substitutions]
    for what in (
        "pool h100-efa nodes: 4 -> 2",
        "tenant post-training gpuQuota: 32 -> 16",
        "image:",
        "entrypoint:",
        "volume models: claim grpo-models",
        "checkpoint volume",
        "operator charts",
        "device plugins",
        "node pools",
        "secret wandbApiKey",
        "secret hfToken",
    ):
        assert any(line.startswith(what) for line in lines), what


def test_the_stack_file_holds_no_secret_and_no_lock_and_creates_no_node_pool() -> None:
    r = planned("eks-prod")
    config = stack_file(r)["config"]
    assert "grpo-infra:wandbApiKey" not in config and "grpo-infra:hfToken" not in config
    assert secret_settings(r) == {"grpo-infra:wandbApiKey": THROWAWAY, "grpo-infra:hfToken": THROWAWAY}
    assert config["grpo-infra:nodesExist"] == "true"
    assert "lock" not in config["grpo-infra:environment"]["image"].get("build", {})
    assert Environment.model_validate(config["grpo-infra:environment"]) is not None


def test_the_engines_ciphertexts_join_the_stack_file_so_the_teams_commands_load_it(tmp_path) -> None:
    """`grpo-infra submit` loads the stack file, which must set each secret the job names, `secure:` (as a team's
    does): the rehearsal copies the engine's encrypted throwaway values there, and only those."""
    from grpo_infra.rehearsal.run import keep_secrets, write_project
    from grpo_infra.spec.load import load_stack as load

    r = planned("eks-prod")
    work = write_project(r, ROOT, tmp_path / "work")
    engine = tmp_path / "engine"
    engine.mkdir()
    secure = {key: {"secure": f"v1:abc:{i}"} for i, key in enumerate(secret_settings(r))}
    (engine / "Pulumi.eks-prod.yaml").write_text(
        yaml.safe_dump({"config": {**secure, "grpo-infra:operatorsInstalled": "true"}})
    )
    keep_secrets(r, engine, work)
    config = yaml.safe_load((work / "stacks" / "Pulumi.eks-prod.yaml").read_text())["config"]
    assert {k: config[k] for k in secure} == secure and "grpo-infra:operatorsInstalled" not in config
    assert load("eks-prod", work).environment.job.name == r.env.job.name


def test_the_cpu_nodes_carry_the_head_pools_labels_and_the_gpu_nodes_the_topologys() -> None:
    env = planned("eks-prod").env
    nodes = real_nodes(env, cpu_nodes=2)
    cpu = [n for n in nodes if not n.devices]
    assert [n.labels for n in cpu] == [dict(env.kubernetes.head_pool.labels)] * 2
    for node in nodes:
        if node.devices:
            for level in env.kubernetes.topology.levels[:-1]:
                assert level in node.labels


def _worker_requests(env: Environment, obj: dict) -> list[dict]:
    spec = obj["spec"]["rayClusterSpec"]
    return [g["template"]["spec"]["containers"][0]["resources"]["requests"] for g in spec["workerGroupSpecs"]]


@pytest.mark.parametrize("stack", ["eks-prod", "gke-dev"])
def test_a_pod_fits_the_local_node_by_the_same_margin_as_the_cloud_node(stack: str) -> None:
    r = planned(stack)
    env = r.env
    by = factors(env, LOCAL)
    job = next(o for o in render.objects(env) if o["kind"] == "RayJob")
    pool = env.gang.pool
    cloud = pool_allocatable(env, pool.name)
    [before] = _worker_requests(env, job)
    [after] = _worker_requests(env, scale_object(env, copy.deepcopy(job), by))
    for name, cloud_room, local_room in (
        ("cpu", cloud.cpu_milli / 1000, LOCAL[0] / 1000),
        ("memory", cloud.memory_mi * 2**20, LOCAL[1] * 2**20),
    ):
        share_cloud = parse_quantity(before[name]) / cloud_room
        share_local = parse_quantity(after[name]) / local_room
        assert share_local <= share_cloud <= 1
        assert share_cloud - share_local < 0.01, name
    # Too big for the cloud node is too big for the local one.
    too_big = {
        "nodeSelector": dict(pool.labels),
        "containers": [{"resources": {"requests": {"cpu": f"{cloud.cpu_milli + 1000}m"}}}],
    }
    scaled = scale_object(env, {"kind": "Pod", "spec": too_big}, by)
    assert parse_quantity(scaled["spec"]["containers"][0]["resources"]["requests"]["cpu"]) * 1000 > LOCAL[0]
    assert node_share(env, pool).gpus == pool.gpu.per_node


def test_the_head_and_the_submitter_scale_by_the_head_pools_factor_and_the_quota_with_its_pods() -> None:
    env = planned("gke-dev").env
    by = factors(env, LOCAL)
    assert pod_pool(env, {"nodeSelector": dict(env.kubernetes.head_pool.labels), "containers": []}) == HEAD
    queues = [scale_object(env, o, by) for o in render.objects(env) if o["kind"] == "ClusterQueue"]
    job = scale_object(env, next(o for o in render.objects(env) if o["kind"] == "RayJob"), by)
    flavors = {
        f["name"]: {r["name"]: parse_quantity(r["nominalQuota"]) for r in f["resources"]}
        for f in queues[0]["spec"]["resourceGroups"][0]["flavors"]
    }
    [worker] = _worker_requests(env, job)
    replicas = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"]
    assert parse_quantity(worker["cpu"]) * replicas <= flavors[env.gang.pool.name]["cpu"]
    assert parse_quantity(worker["memory"]) * replicas <= flavors[env.gang.pool.name]["memory"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_rehearsed_stack_passes_check_so_its_gang_can_be_admitted(stack: str) -> None:
    """The shrunk gang, its tenant's quota and the other tenants' fit the shrunk pools; the only waived rule
    is the one the CPU variant trips on real GPU models."""
    from grpo_infra.check import violations

    assert [v.line() for v in violations(planned(stack).env)] == []


@pytest.mark.parametrize("stack", STACKS)
def test_no_init_container_asks_more_than_its_pods_containers_so_leaving_it_unscaled_keeps_the_fit(stack: str) -> None:
    """The scale leaves init containers (the image guard: a program of a fixed size) as rendered; a pod's fit
    is then still its containers' sum, as long as no init container asks for more than they do."""
    env = planned(stack).env
    job = next(o for o in render.objects(env) if o["kind"] == "RayJob")
    spec = job["spec"]["rayClusterSpec"]
    for pod in [spec["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in spec["workerGroupSpecs"])]:
        for name in ("cpu", "memory"):
            asks = [
                parse_quantity(c.get("resources", {}).get("requests", {}).get(name, 0)) for c in pod["initContainers"]
            ]
            assert max(asks) <= sum(parse_quantity(c["resources"]["requests"][name]) for c in pod["containers"])


def test_a_stack_without_a_head_pool_is_refused_unless_its_head_fits_a_local_node_unscaled() -> None:
    """No head pool: the head may land on any untainted node, of a size the stack never says, so there is no
    factor to scale it by. local-k8s's small head fits a local node as it is; a cloud-sized one is refused."""
    assert HEAD not in factors(planned("local-k8s").env, LOCAL)
    data = load_stack("onprem-k8s", ROOT).environment.model_dump(by_alias=True, exclude_none=True, mode="json")
    del data["kubernetes"]["headPool"]
    env = rehearsal("onprem-k8s", Environment.model_validate(data)).env
    with pytest.raises(
        ValueError, match=r"^kubernetes\.headPool: not declared, so the Ray head \(8000m CPU, 32768Mi\)"
    ):
        factors(env, LOCAL)


def test_a_stacks_own_host_paths_become_the_rehearsals_so_the_machines_are_never_touched() -> None:
    """local-k8s names host paths of this machine (/var/lib/grpo-*): a rehearsal mounts directories of its own,
    made empty before and removed after, instead (its pods otherwise wait for ever on a missing directory)."""
    planned = rehearsal("local-k8s", load_stack("local-k8s", ROOT).environment)
    assert planned.env.kubernetes is not None
    assert all(v.host_path and v.host_path.startswith(HOST_ROOT) for v in planned.env.kubernetes.volumes)
    checkpoint = planned.env.job.checkpoint.volume
    assert checkpoint is not None and checkpoint.host_path == f"{HOST_ROOT}/checkpoints" and checkpoint.host_path_shared
    assert "volume models: host path /var/lib/grpo-models -> host path /var/lib/grpo-rehearsal/models" in [
        s.line().split(" (")[0] for s in planned.substitutions
    ]


def test_cpu_limits_stay_the_stacks_own_so_no_timeout_runs_short() -> None:
    """Requests (the fit) and memory scale; a CPU limit only decides speed: cut by the head's factor, eks-prod's
    submitter (500m → 31m) ran its 5-s liveness check of the head's GCS out of time and failed every attempt."""
    env = planned("eks-prod").env
    by = factors(env, LOCAL)
    job = next(o for o in render.objects(env) if o["kind"] == "RayJob")
    before = copy.deepcopy(job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["resources"])
    after = scale_object(env, job, by)["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["resources"]
    assert after["limits"]["cpu"] == before["limits"]["cpu"] == "500m"
    assert parse_quantity(after["requests"]["cpu"]) < parse_quantity(before["requests"]["cpu"]) / 10
    assert parse_quantity(after["limits"]["memory"]) < parse_quantity(before["limits"]["memory"]) / 2
