"""Each shipped Kubernetes stack's Pulumi program registers the pool its spec describes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_infra.nodepools import AMI_TYPE, EFA_INTERFACES
from grpo_infra.nodepools.capacity_blocks import desired_now, scheduled_actions, utc_now
from grpo_infra.nodepools.charts import EFA_DEVICE_PLUGIN, GPU_OPERATOR, NVIDIA_DEVICE_PLUGIN
from grpo_infra.pulumi_graph import record
from grpo_infra.spec import load_stack

from .conftest import ROOT, shipped_graph

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_POOL = "gcp:container/nodePool:NodePool"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
RELEASE = "kubernetes:helm.sh/v3:Release"
SCHEDULE = "aws:autoscaling/schedule:Schedule"


def pool_releases(graph) -> dict[str, dict]:
    """Helm releases registered for the pools (children of the node pool components)."""
    owners = {r.urn for r in graph.resources if r.type.startswith("grpo-infra:nodepools:")}
    return {r.name: r.inputs for r in graph.of_type(RELEASE) if r.parent in owners}


def releases(stack: str) -> dict[str, dict]:
    return pool_releases(shipped_graph(stack))


def test_eks_node_group_is_the_spec_pool() -> None:
    graph = shipped_graph("eks-prod")
    pool = load_stack("eks-prod", ROOT).environment.pool("h100-efa")
    group = graph.named(NODE_GROUP, pool.name).inputs
    assert group["clusterName"] == "ml-prod"
    assert group["amiType"] == AMI_TYPE == "AL2023_x86_64_NVIDIA"
    # A Capacity Block's instance type is the launch template's; EKS refuses it in both places.
    assert "instanceTypes" not in group
    assert graph.named(LAUNCH_TEMPLATE, pool.name).inputs["instanceType"] == "p5.48xlarge"
    # Outside the block EC2 launches nothing: the group waits at 0 and scheduled actions move it.
    desired = desired_now(pool, utc_now())
    assert group["scalingConfig"] == {"desiredSize": desired, "minSize": 0, "maxSize": 4}
    assert group["labels"] == pool.labels
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in group["taints"]
    assert len(group["taints"]) == len(pool.taints)
    assert group["subnetIds"] == ["subnet-0a1b2c3d4e5f60718"]


def test_eks_launch_template_gives_every_efa_interface_and_the_reservation() -> None:
    graph = shipped_graph("eks-prod")
    template = graph.named(LAUNCH_TEMPLATE, "h100-efa")
    group = graph.named(NODE_GROUP, "h100-efa")
    assert template.urn in group.dependencies  # the node group is launched from this template
    interfaces = template.inputs["networkInterfaces"]
    efa = [i for i in interfaces if i["interfaceType"] == "efa-only"]
    assert len(efa) == EFA_INTERFACES["p5.48xlarge"] == 32
    assert sorted(i["networkCardIndex"] for i in efa) == list(range(32))
    primary = [i for i in interfaces if i["interfaceType"] == "interface"]
    assert [(p["networkCardIndex"], p["deviceIndex"]) for p in primary] == [(0, 0)]
    assert all(i["securityGroups"] == ["sg-0a1b2c3d4e5f60718"] for i in interfaces)
    target = template.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}


def test_eks_device_plugins_are_pinned_and_reach_the_tainted_pool() -> None:
    found = releases("eks-prod")
    nvidia, efa = found["nvidia-device-plugin"], found["aws-efa-k8s-device-plugin"]
    assert (nvidia["repositoryOpts"]["repo"], nvidia["chart"], nvidia["version"]) == NVIDIA_DEVICE_PLUGIN
    assert (efa["repositoryOpts"]["repo"], efa["chart"], efa["version"]) == EFA_DEVICE_PLUGIN
    toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert nvidia["values"]["tolerations"] == [toleration] == efa["values"]["tolerations"]
    terms = nvidia["values"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "grpo-infra/pool", "operator": "In", "values": ["h100-efa"]} in expressions


def test_gke_node_pool_is_the_spec_pool() -> None:
    graph = shipped_graph("gke-dev")
    pool = load_stack("gke-dev", ROOT).environment.pool("a3-h100")
    node_pool = graph.named(NODE_POOL, "a3-h100").inputs
    assert (node_pool["cluster"], node_pool["location"], node_pool["nodeLocations"]) == (
        "ml-dev",
        "us-central1",
        ["us-central1-a"],
    )
    assert node_pool["nodeCount"] == 2
    assert node_pool["placementPolicy"] == {"type": "COMPACT"}
    config = node_pool["nodeConfig"]
    assert config["machineType"] == "a3-highgpu-8g"
    assert config["guestAccelerators"] == [
        {"type": "nvidia-h100-80gb", "count": 8, "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}
    ]
    assert config["gvnic"] == {"enabled": True}
    assert config["labels"] == pool.labels
    # GKE puts nvidia.com/gpu=present:NoSchedule on GPU nodes itself; the spec's other taints are ours.
    assert config.get("taints", []) == []
    assert releases("gke-dev") == {}  # GKE runs the NVIDIA device plugin itself


def test_existing_cluster_patches_exactly_the_named_hosts() -> None:
    graph = shipped_graph("onprem-k8s")
    patches = graph.of_type(NODE_PATCH)
    assert sorted(p.inputs["metadata"]["name"] for p in patches) == [f"dc1-gpu-0{i}" for i in range(1, 5)]
    for patch in patches:
        assert patch.inputs["metadata"]["labels"] == {"grpo-infra/pool": "h100-roce"}
        assert patch.inputs["spec"]["taints"] == [{"key": "grpo-infra/gpu", "value": "h100", "effect": "NoSchedule"}]
        # Safe by default: a conflict with another field manager fails loudly, nothing is forced.
        assert "pulumi.com/patchForce" not in patch.inputs["metadata"].get("annotations", {})
    assert releases("onprem-k8s") == {}  # drivers and device plugin are the site's unless asked for


def test_existing_cluster_gpu_operator_when_asked(variant) -> None:
    def ask(env: dict) -> None:
        env["pools"][0]["existing"] = {"installGpuOperator": True, "installRdmaDevicePlugin": True}

    graph = record("onprem-k8s", variant("onprem-k8s", ask))
    operator = pool_releases(graph)["gpu-operator"]
    assert (operator["repositoryOpts"]["repo"], operator["chart"], operator["version"]) == GPU_OPERATOR
    toleration = {"key": "grpo-infra/gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}
    assert operator["values"]["daemonsets"]["tolerations"] == [toleration]
    assert operator["values"]["node-feature-discovery"]["worker"]["tolerations"] == [toleration]
    assert operator["values"]["driver"]["enabled"] is False
    # Every DaemonSet it runs on a GPU node has a stated request, subtracted from the worker's room.
    for key in ("toolkit", "devicePlugin", "dcgmExporter", "gfd", "validator", "nodeStatusExporter"):
        assert set(operator["values"][key]["resources"]["requests"]) == {"cpu", "memory"}


@pytest.mark.parametrize("stack", ["eks-prod", "gke-dev", "onprem-k8s"])
def test_pool_components_register_their_outputs_and_parent_their_resources(stack: str) -> None:
    graph = shipped_graph(stack)
    components = [r for r in graph.resources if r.type.startswith("grpo-infra:nodepools:")]
    assert components
    for component in components:
        assert component.outputs, f"{component.type} {component.name} registered no outputs"
        assert graph.children(component.urn), f"{component.type} {component.name} has no children"


@pytest.mark.parametrize("stack", ["eks-prod", "gke-dev", "onprem-k8s"])
def test_no_secret_value_reaches_the_graph(stack: str) -> None:
    graph = shipped_graph(stack)
    assert graph.plaintext_secrets == ()
    assert "<secret>" not in graph.dumps()
    json.loads(graph.dumps())


def test_same_spec_same_graph() -> None:
    first = record("onprem-k8s", ROOT).dumps()
    assert record("onprem-k8s", ROOT).dumps() == first


def test_slurm_stacks_register_no_node_pools() -> None:
    for stack in ("local-slurm", "onprem-slurm"):
        graph = record(stack, ROOT)
        assert not [r for r in graph.resources if r.type.startswith("grpo-infra:nodepools:")]


def test_variant_root_is_independent(tmp_path: Path) -> None:
    # record() reads stacks/ under the root it is given, not the checkout's.
    from grpo_infra.spec import SpecError

    with pytest.raises(SpecError, match="no such stack"):
        record("onprem-k8s", tmp_path)


def test_eks_program_launches_the_capacity_block_and_a_head_node_group() -> None:
    graph = shipped_graph("eks-prod")
    assert graph.named(NODE_GROUP, "h100-efa").inputs["capacityType"] == "CAPACITY_BLOCK"
    market = graph.named(LAUNCH_TEMPLATE, "h100-efa").inputs["instanceMarketOptions"]
    assert market == {"marketType": "capacity-block"}
    head = graph.named(NODE_GROUP, "ray-head").inputs
    assert (head["instanceTypes"], head["amiType"], head["labels"]) == (
        ["m7i.8xlarge"],
        "AL2023_x86_64_STANDARD",
        {"grpo-infra/pool": "ray-head"},
    )
    assert head.get("taints", []) == []


def test_gke_program_creates_a_head_pool_and_keeps_upgrades_off() -> None:
    graph = shipped_graph("gke-dev")
    gpu = graph.named("gcp:container/nodePool:NodePool", "a3-h100").inputs
    assert gpu["management"] == {"autoUpgrade": False, "autoRepair": True}
    head = graph.named("gcp:container/nodePool:NodePool", "ray-head").inputs
    assert head["nodeConfig"]["machineType"] == "n2-standard-16"


def test_onprem_program_installs_the_rdma_plugin_before_the_job() -> None:
    graph = shipped_graph("onprem-k8s")
    daemonset = graph.named("kubernetes:apps/v1:DaemonSet", "rdma-shared-device-plugin")
    container = daemonset.inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
    job = next(r for r in graph.resources if r.type == "kubernetes:ray.io/v1:RayJob")
    # The job waits for the node pools, the RDMA plugin among them.
    plugin = next(r for r in graph.resources if r.type == "grpo-infra:nodepools:RdmaDevicePlugin")
    assert plugin.urn in graph.upstream(job.urn, through_parents=True)


def test_capacity_block_schedules_are_registered_on_the_node_groups_autoscaling_group() -> None:
    """The actions still ahead of `pulumi up` (their exact times: tests/pulumi/test_capacity_blocks.py)."""
    graph = shipped_graph("eks-prod")
    pool = load_stack("eks-prod", ROOT).environment.pool("h100-efa")
    expected = {a["scheduled_action_name"]: a for a in scheduled_actions(pool, utc_now())}
    schedules = {r.name: r for r in graph.of_type(SCHEDULE)}
    assert set(schedules) == set(expected)
    group = graph.named(NODE_GROUP, "h100-efa")
    for name, schedule in schedules.items():
        assert schedule.inputs["startTime"] == expected[name]["start_time"]
        assert schedule.inputs["desiredCapacity"] == expected[name]["desired_capacity"]
        assert group.urn in schedule.dependencies  # the group's own Auto Scaling group
