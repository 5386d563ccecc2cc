"""What a real cluster would refuse or stall on, and the `check` rules that catch a stack still wrong.

Expected numbers are worked out by hand from the providers' published rules (see the comments), never
taken from the code under test.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from grpo_infra.check import violations
from grpo_infra.check.kubernetes_rules import kubernetes_violations
from grpo_infra.k8s import objects, ray_job
from grpo_infra.k8s.allocatable import node_allocatable
from grpo_infra.k8s.kueue_config import manager_config
from grpo_infra.nodepools import head_node_group_args, head_node_pool_args, launch_template_args, node_group_args
from grpo_infra.nodepools.gke import node_pool_args
from grpo_infra.nodepools.rdma import RDMA_PLUGIN_IMAGE, rdma_device_plugin_objects

from .conftest import by_kind, env_of, variant


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


def _head(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def _rules(found: list) -> set[str]:
    return {v.rule for v in found}


def _env_vars(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}


# --- 2: allocatable per provider, and the worker sized from it -------------------------------------


def test_gke_a3_allocatable_follows_the_published_tiers() -> None:
    # a3-highgpu-8g: 1872 GiB = 1916928 MiB nominal; no published measurement, so the kernel is taken to
    # show 96.5% of it: 1849835 MiB. Memory reserved (on the nominal size): 25% of 4096 (1024) + 20% of
    # 4096 (819.2) + 10% of 8192 (819.2) + 6% of 114688 (6881.28) + 2% of 1785856 (35717.12) = 45260.8 MiB,
    # plus the 100 MiB eviction threshold: 1849835 - 45260 - 100 = 1804475 MiB.
    # CPU: 60m + 10m + 10m + 0.25% of 204 cores (510m) = 590m.
    alloc = node_allocatable(env_of("gke-dev"), 208, 1872, "a3-highgpu-8g")
    assert (alloc.memory_mi, alloc.cpu_milli) == (1804475, 208000 - 590)


def test_eks_p5_allocatable_follows_nodeadm() -> None:
    # p5.48xlarge: 2 ENIs x (50 - 1) + 2 = 100 pods; kube-reserved memory 11 x 100 + 255 = 1355 MiB;
    # eviction 100 MiB, from the kernel-visible 96.5% of 2048 GiB (2023751 MiB).
    # CPU: 60 + 10 + 10 + 0.25% of 188 cores (470) = 550m.
    alloc = node_allocatable(env_of("eks-prod"), 192, 2048, "p5.48xlarge")
    assert (alloc.memory_mi, alloc.cpu_milli) == (2023751 - 1355 - 100, 192000 - 550)


def test_an_unknown_eks_instance_type_needs_max_pods() -> None:
    env = env_of("eks-prod")
    with pytest.raises(ValueError, match="state it with `maxPods`"):
        node_allocatable(env, 96, 768, "p9.48xlarge")
    assert node_allocatable(env, 96, 768, "p9.48xlarge", 50).reserved_memory_mi == 11 * 50 + 255


def test_worker_requests_are_allocatable_minus_daemonsets_and_reserve() -> None:
    # gke-dev: 1804475 MiB allocatable - 8 GiB nodeReserve = 1796283 MiB; 207410m - 2000m = 205410m.
    gke = _worker(ray_job(env_of("gke-dev")))["containers"][0]["resources"]["requests"]
    assert (gke["cpu"], gke["memory"]) == ("205410m", "1796283Mi")
    # eks-prod: 2022296 MiB - NVIDIA plugin 128 - EFA plugin 20 - nodeReserve 32768 = 1989380 MiB;
    # 191450m - 50m - 10m - 2000m = 189390m.
    eks = _worker(ray_job(env_of("eks-prod")))["containers"][0]["resources"]["requests"]
    assert (eks["cpu"], eks["memory"]) == ("189390m", "1989380Mi")


def test_pod_fits_node_refuses_the_old_gke_worker_and_prints_the_arithmetic() -> None:
    env = env_of("gke-dev")
    job = copy.deepcopy(ray_job(env))
    # What gke-dev rendered before: 1872 - 32 GiB of nodeReserve, as if GKE reserved nothing.
    for key in ("requests", "limits"):
        _worker(job)["containers"][0]["resources"][key]["memory"] = "1840Gi"
    from grpo_infra.check import kubernetes_rules

    found = [v for v in kubernetes_rules._worker_fit(env, job) if v.rule == "pod-fits-node"]
    assert len(found) == 1, found
    assert "1762.2 GiB" in found[0].message and "1840.0 GiB" in found[0].message
    # 1884160 MiB asked - 1796283 MiB of room = 87877 MiB = 85.8 GiB.
    assert found[0].by == "85.8 GiB"


def test_a_pool_declared_larger_than_its_share_is_refused() -> None:
    # The worker is derived from the pool, so only an edited RayJob can overshoot: the rule judges it
    # against the provider's allocatable, not against the same derivation.
    env = env_of("eks-prod")
    job = copy.deepcopy(ray_job(env))
    _worker(job)["containers"][0]["resources"]["requests"]["cpu"] = "192"
    found = [v for v in kubernetes_violations(env) if v.rule == "pod-fits-node"]
    assert found == []
    from grpo_infra.check import kubernetes_rules

    over = kubernetes_rules._worker_fit(env, job)
    assert [(v.rule, v.by) for v in over] == [("pod-fits-node", "2.61 CPUs")]


# --- 1: volumes ------------------------------------------------------------------------------------


def test_model_and_data_are_mounted_on_head_and_workers() -> None:
    job = ray_job(env_of("onprem-k8s"))
    for pod in (_head(job), _worker(job)):
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["/models"]["readOnly"] is True and mounts["/data"]["readOnly"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["models"]["nfs"] == {"server": "nfs.dc1.internal", "path": "/export/models", "readOnly": True}


def test_paths_on_no_volume_are_refused() -> None:
    env = variant("gke-dev", lambda raw: raw["kubernetes"].pop("volumes"))
    found = [v for v in violations(env) if v.rule == "path-on-volume"]
    # model, one train file, one val file; each on the head and on the worker.
    assert sorted({v.where.rsplit(".", 2)[-2] + "." + v.where.rsplit(".", 1)[-1] for v in found}) == [
        "data.trainFiles[0]",
        "data.valFiles[0]",
        "job.modelPath",
    ]
    assert len(found) == 6


def test_a_hub_model_id_needs_no_volume() -> None:
    def hub(raw: dict[str, Any]) -> None:
        raw["job"]["modelPath"] = "Qwen/Qwen2.5-3B-Instruct"

    assert [v for v in violations(variant("gke-dev", hub)) if v.rule == "path-on-volume"] == []


# --- 3: sockets inside pods ------------------------------------------------------------------------


def test_pods_use_their_own_interface_not_the_hosts() -> None:
    env_vars = _env_vars(_worker(ray_job(env_of("onprem-k8s"))))
    assert (env_vars["NCCL_SOCKET_IFNAME"], env_vars["GLOO_SOCKET_IFNAME"]) == ("=eth0", "eth0")
    assert env_vars["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"


def test_a_host_interface_in_a_pod_network_is_refused() -> None:
    def host_nic(raw: dict[str, Any]) -> None:
        raw["job"].setdefault("env", {})["NCCL_SOCKET_IFNAME"] = "ens1f0np0"

    found = [v for v in violations(variant("onprem-k8s", host_nic)) if v.rule == "pod-socket-interface"]
    assert found and "ens1f0np0 does not exist there" in found[0].message


def test_host_networking_uses_host_nics_and_a_per_job_port_block() -> None:
    def host(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 20000}

    env = variant("onprem-k8s", host)
    group = ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    pod = group["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert _env_vars(pod)["NCCL_SOCKET_IFNAME"] == "=ens1f0np0"
    # Block of 256 from 20000: node manager at +3, object manager at +4, workers from +16 to +255.
    params = group["rayStartParams"]
    assert (params["node-manager-port"], params["object-manager-port"]) == ("20003", "20004")
    assert (params["min-worker-port"], params["max-worker-port"]) == ("20016", "20255")
    assert "pod-socket-interface" not in _rules(violations(env))


def test_host_ports_in_the_ephemeral_range_are_refused() -> None:
    def host(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "host", "hostPortStart": 40000}

    found = [v for v in violations(variant("onprem-k8s", host)) if v.rule == "host-ports-ephemeral"]
    assert [v.by for v in found] == ["256 ports"]


def test_a_secondary_network_annotates_the_workers() -> None:
    def multus(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["network"] = {"mode": "secondary", "attachment": "rl-team/roce-net"}

    env = variant("onprem-k8s", multus)
    group = ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["template"]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rl-team/roce-net"
    assert _env_vars(group["template"]["spec"])["GLOO_SOCKET_IFNAME"] == "net1"


# --- 5: TTL ----------------------------------------------------------------------------------------


def test_finished_jobs_free_their_gpus_within_a_minute() -> None:
    assert ray_job(env_of("gke-dev"))["spec"]["ttlSecondsAfterFinished"] == 30

    def hour(raw: dict[str, Any]) -> None:
        raw["kubernetes"].setdefault("rayJob", {})["ttlSecondsAfterFinished"] = 3600

    found = [v for v in violations(variant("gke-dev", hour)) if v.rule == "ttl-after-finish"]
    assert [v.by for v in found] == ["3540 s"]


# --- 6: Capacity Blocks ------------------------------------------------------------------------------


def test_capacity_block_node_group_and_launch_template() -> None:
    env = env_of("eks-prod")
    pool = env.gang.pool
    assert node_group_args(env, pool)["capacity_type"] == "CAPACITY_BLOCK"
    template = launch_template_args(env, pool)
    assert template is not None
    assert template["instance_market_options"] == {"market_type": "capacity-block"}
    assert template["capacity_reservation_specification"]["capacity_reservation_target"] == {
        "capacity_reservation_id": "cr-0123456789abcdef0"
    }


def test_a_capacity_block_not_yet_started_waits_at_zero_nodes() -> None:
    from datetime import UTC, datetime

    env = env_of("eks-prod")  # block from 2026-12-14T11:30Z (tests/pulumi/test_capacity_blocks.py)
    before = datetime(2026, 12, 1, tzinfo=UTC)
    assert node_group_args(env, env.gang.pool, before)["scaling_config"] == {
        "desired_size": 0,
        "min_size": 0,
        "max_size": 4,
    }


@pytest.mark.parametrize(
    ("eks", "message"),
    [
        ({"capacityType": "CAPACITY_BLOCK", "capacityReservationId": None}, "needs the block's id"),
        ({"capacityType": "SPOT"}, "SPOT node group cannot launch into capacity reservation"),
    ],
)
def test_capacity_type_must_match_the_reservation(eks: dict[str, Any], message: str) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["pools"][0]["eks"].update(eks)
        if eks.get("capacityReservationId", "") is None:
            raw["pools"][0]["eks"].pop("capacityReservationId")

    with pytest.raises(ValidationError, match=message):
        variant("eks-prod", change)


# --- 7: rdma/roce ----------------------------------------------------------------------------------


def test_the_rdma_plugin_is_installed_for_the_roce_pool() -> None:
    config, daemonset = rdma_device_plugin_objects(env_of("onprem-k8s"))
    assert RDMA_PLUGIN_IMAGE == "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
    import json

    (resource,) = json.loads(config["data"]["config.json"])["configList"]
    assert (resource["resourcePrefix"], resource["resourceName"]) == ("rdma", "roce")
    assert resource["selectors"] == {"vendors": ["15b3"], "drivers": ["mlx5_core"], "linkTypes": ["ether"]}
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "grpo-infra/pool", "operator": "In", "values": ["h100-roce"]}]}]


def test_a_resource_nothing_advertises_is_refused() -> None:
    env = variant("onprem-k8s", lambda raw: raw["pools"][0].pop("existing"))
    found = [v for v in violations(env) if v.rule == "resource-provided"]
    assert found and "rdma/roce" in found[0].message
    declared = variant(
        "onprem-k8s",
        lambda raw: (
            raw["pools"][0].pop("existing"),
            raw["kubernetes"].update(providedResources=["nvidia.com/gpu", "rdma/roce"]),
        ),
    )
    assert "resource-provided" not in _rules(violations(declared))


# --- 9: EKS topology -------------------------------------------------------------------------------


def test_eks_topology_prefers_layer_3() -> None:
    group = ray_job(env_of("eks-prod"))["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == (
        "topology.k8s.aws/network-node-layer-3"
    )

    def two_layers(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["topology"]["levels"] = [
            "topology.k8s.aws/network-node-layer-1",
            "topology.k8s.aws/network-node-layer-2",
            "kubernetes.io/hostname",
        ]

    assert "eks-topology-layer-3" in _rules(violations(variant("eks-prod", two_layers)))


# --- 10: a node for the head ------------------------------------------------------------------------


def test_eks_and_gke_need_a_head_pool() -> None:
    for stack in ("eks-prod", "gke-dev"):
        with pytest.raises(ValidationError, match="needs `headPool`"):
            variant(stack, lambda raw: raw["kubernetes"].pop("headPool"))


def test_head_and_submitter_are_placed_on_the_head_pool() -> None:
    env = env_of("gke-dev")
    job = ray_job(env)
    assert _head(job)["nodeSelector"] == {"grpo-infra/pool": "ray-head"}
    assert job["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"grpo-infra/pool": "ray-head"}
    flavor = next(f for f in by_kind(objects(env), "ResourceFlavor") if f["metadata"]["name"] == "ray-head")
    assert flavor["spec"] == {"nodeLabels": {"grpo-infra/pool": "ray-head"}}
    pool = head_node_pool_args(env)
    assert (pool["node_config"]["machine_type"], pool["node_count"]) == ("n2-standard-16", 1)
    group = head_node_group_args(env_of("eks-prod"))
    assert (group["instance_types"], group["taints"]) == (["m7i.8xlarge"], [])


def test_a_head_larger_than_its_node_is_refused() -> None:
    # n2-standard-16: 64 GiB less 3.5% the kernel keeps (61.76 GiB) - 5.5 GiB (GKE tiers) - 100 MiB
    # - 8 GiB nodeReserve = 48.2 GiB < 60 GiB.
    env = variant("gke-dev", lambda raw: raw["kubernetes"]["rayJob"].update(headMemoryGib=60))
    found = [v for v in violations(env) if v.rule == "head-fits-node"]
    assert [v.by for v in found] == ["11.8 GiB"]


# --- 13: RBAC and Pod Security -----------------------------------------------------------------------


def test_namespaces_enforce_the_strictest_level_the_pods_pass() -> None:
    # gke-dev: no RDMA, no hostPath, no host network: baseline (never restricted: the image runs as root).
    # onprem-k8s: RoCE workers add IPC_LOCK, which baseline forbids: privileged.
    for stack, level in (("gke-dev", "baseline"), ("onprem-k8s", "privileged")):
        for ns in by_kind(objects(env_of(stack)), "Namespace"):
            assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level


def test_a_level_stricter_than_the_pods_is_refused() -> None:
    env = variant("onprem-k8s", lambda raw: raw["kubernetes"].update(podSecurity="baseline"))
    found = [v for v in violations(env) if v.rule == "pod-security"]
    assert found and "capability IPC_LOCK" in found[0].message


# --- 14: GKE upgrades and reservations ----------------------------------------------------------------


def test_gke_pool_does_not_auto_upgrade_and_consumes_its_reservation() -> None:
    env = env_of("gke-dev")
    args = node_pool_args(env, env.gang.pool)
    assert args["management"] == {"auto_upgrade": False, "auto_repair": True}
    assert args["node_config"]["reservation_affinity"]["values"] == ["ml-dev-a3"]


def test_gke_auto_upgrade_needs_a_maintenance_exclusion() -> None:
    with pytest.raises(ValidationError, match="maintenanceExclusion"):
        variant("gke-dev", lambda raw: raw["pools"][0]["gke"].update(autoUpgrade=True))
    env = variant("gke-dev", lambda raw: raw["pools"][0]["gke"].update(autoUpgrade=True, maintenanceExclusion=True))
    assert node_pool_args(env, env.gang.pool)["management"]["auto_upgrade"] is True


# --- 15: blockAdmission ---------------------------------------------------------------------------------


def test_block_admission_is_the_stacks_choice() -> None:
    assert manager_config(env_of("gke-dev"))["waitForPodsReady"]["blockAdmission"] is True
    env = variant("gke-dev", lambda raw: raw["kubernetes"].update(blockAdmission=False))
    assert manager_config(env)["waitForPodsReady"]["blockAdmission"] is False


def test_kueue_admits_no_more_heads_than_the_head_pool_holds() -> None:
    # eks-prod: one m7i.8xlarge head node has 31.85 - 2 CPUs and 125.1 - 32 GiB after nodeReserve; a head
    # (16 CPUs, 64 GiB) plus its submitter (0.5, 1 GiB) fits once. Without the cap the quota would admit
    # 32 / 8 = 4 heads: three stay Pending and their gangs are evicted by waitForPodsReady.
    queue = next(q for q in by_kind(objects(env_of("eks-prod")), "ClusterQueue"))
    head = next(f for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "ray-head")
    quota = {r["name"]: r["nominalQuota"] for r in head["resources"]}
    assert (quota["cpu"], quota["memory"]) == ("16500m", "65Gi")


def test_more_tenants_than_head_nodes_is_refused() -> None:
    def two_tenants(raw: dict[str, Any]) -> None:
        raw["tenants"] = [
            {"name": "dev", "queue": "dev", "gpuQuota": 8},
            {"name": "eval", "queue": "eval", "gpuQuota": 8},
        ]
        raw["job"]["nodes"] = 1

    found = [v for v in violations(variant("gke-dev", two_tenants)) if v.rule == "head-pool-capacity"]
    assert [v.by for v in found] == ["1 pair(s)"]

    def and_two_head_nodes(raw: dict[str, Any]) -> None:
        two_tenants(raw)
        raw["kubernetes"]["headPool"]["nodes"] = 2

    assert "head-pool-capacity" not in _rules(violations(variant("gke-dev", and_two_head_nodes)))


@pytest.mark.parametrize(
    "network",
    [{"mode": "host", "hostPortStart": 20000}, {"mode": "secondary", "attachment": "rl-team/roce-net"}],
    ids=["host", "secondary"],
)
def test_network_variants_and_the_rdma_plugin_validate(network: dict[str, Any]) -> None:
    from grpo_infra.validate import validate_objects

    env = variant("onprem-k8s", lambda raw: raw["kubernetes"].update(network=network))
    assert validate_objects([*objects(env), *rdma_device_plugin_objects(env)]) == []


def test_a_pool_claiming_more_than_its_machine_is_refused() -> None:
    # a3-highgpu-8g: 208 vCPUs, 1872 GB (GCE's A3 table); a pool that says 2048 GiB would size every
    # worker 176 GiB beyond what a node has.
    env = variant("gke-dev", lambda raw: raw["pools"][0].update(memoryGib=2048))
    found = [v for v in violations(env) if v.rule == "machine-shape"]
    assert [(v.where.rsplit(".", 1)[-1], v.by) for v in found] == [("pools[0]", "0 CPUs, 176 GiB")]
