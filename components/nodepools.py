"""GPU node pools: EKS node groups, GKE node pools, labels and taints on an existing cluster's nodes.

Each component registers exactly what `grpo_infra.nodepools` renders. pulumi-aws and pulumi-gcp are
optional extras: they are imported only when a stack's provider needs them, and a missing one stops
the program with one line naming the extra to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from grpo_infra import nodepools as render
from grpo_infra.nodepools.capacity_blocks import utc_now
from grpo_infra.nodepools.resources import all_pool_resources
from grpo_infra.spec import Environment
from grpo_infra.spec.load import stack_source

# Provider SDK module → the extra of this project that installs it.
EXTRAS = {"pulumi_aws": "aws", "pulumi_gcp": "gcp"}


class MissingExtra(pulumi.RunError):
    """A stack needs a cloud provider SDK that this install does not have."""


def provider_sdk(module: str) -> ModuleType:
    """Import a cloud provider SDK, or stop with the one line that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra = EXTRAS[module]
        package = module.replace("_", "-")
        raise MissingExtra(
            f"stack {pulumi.get_stack()} needs {package}, which is not installed: pip install -e '.[{extra}]'"
        ) from None


@dataclass(frozen=True)
class EksGpuNodeGroupArgs:
    """The rendered node group and, for EFA or a capacity reservation, its launch template."""

    node_group: dict[str, Any]
    launch_template: dict[str, Any] | None
    # A Capacity Block's scheduled actions on the node group's Auto Scaling group (none otherwise).
    schedule: tuple[dict[str, Any], ...] = ()


def _autoscaling_group_name(resources: Any) -> str | None:
    """The Auto Scaling group EKS made for a managed node group (its `resources[0].autoscalingGroups[0]`)."""
    if not resources:
        return None
    first = resources[0]
    groups = first.get("autoscaling_groups") if isinstance(first, dict) else first.autoscaling_groups
    if not groups:
        return None
    group = groups[0]
    return group.get("name") if isinstance(group, dict) else group.name


class EksGpuNodeGroup(pulumi.ComponentResource):
    """An EKS managed node group of GPU nodes on an existing cluster."""

    def __init__(self, name: str, args: EksGpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        aws = provider_sdk("pulumi_aws")
        super().__init__("grpo-infra:nodepools:EksGpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        node_group = dict(args.node_group)
        self.launch_template = None
        if args.launch_template is not None:
            self.launch_template = aws.ec2.LaunchTemplate(name, opts=child, **args.launch_template)
            node_group["launch_template"] = {
                "id": self.launch_template.id,
                # The version the template has once created (an integer; EKS wants it as a string).
                "version": self.launch_template.latest_version.apply(lambda v: None if v is None else str(int(v))),
            }
        # On a Capacity Block the desired size belongs to the scheduled actions: `pulumi up` never resets it.
        ignore = ["scalingConfig.desiredSize"] if args.schedule else []
        self.node_group = aws.eks.NodeGroup(
            name, opts=pulumi.ResourceOptions(parent=self, ignore_changes=ignore), **node_group
        )
        group_name = self.node_group.resources.apply(_autoscaling_group_name)
        self.schedules = [
            aws.autoscaling.Schedule(
                action["scheduled_action_name"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.node_group]),
                autoscaling_group_name=group_name,
                **action,
            )
            for action in args.schedule
        ]
        self.register_outputs(
            {
                "nodeGroupName": self.node_group.node_group_name,
                "instanceTypes": self.node_group.instance_types,
                "size": args.node_group["scaling_config"]["desired_size"],
            }
        )


@dataclass(frozen=True)
class GkeGpuNodePoolArgs:
    """The rendered node pool."""

    node_pool: dict[str, Any]


class GkeGpuNodePool(pulumi.ComponentResource):
    """A GKE node pool of GPU nodes on an existing cluster."""

    def __init__(self, name: str, args: GkeGpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        gcp = provider_sdk("pulumi_gcp")
        super().__init__("grpo-infra:nodepools:GkeGpuNodePool", name, None, opts)
        self.node_pool = gcp.container.NodePool(name, opts=pulumi.ResourceOptions(parent=self), **args.node_pool)
        self.register_outputs(
            {
                "nodePoolName": self.node_pool.name,
                "machineType": args.node_pool["node_config"]["machine_type"],
                "size": args.node_pool["node_count"],
            }
        )


@dataclass(frozen=True)
class ExistingNodePoolArgs:
    """The rendered per-node patches (labels and taints)."""

    node_patches: list[dict[str, Any]]


class ExistingNodePool(pulumi.ComponentResource):
    """An existing cluster's machines, labelled and tainted as the pool says, by server-side apply."""

    def __init__(self, name: str, args: ExistingNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("grpo-infra:nodepools:ExistingNodePool", name, None, opts)
        self.node_patches = [
            k8s.core.v1.NodePatch(
                f"{name}-{patch['metadata']['name']}",
                metadata=patch["metadata"],
                spec=patch["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            for patch in args.node_patches
        ]
        self.register_outputs({"nodes": [p["metadata"]["name"] for p in args.node_patches]})


class RdmaDevicePlugin(pulumi.ComponentResource):
    """The RDMA shared device plugin's ConfigMap and DaemonSet (upstream ships manifests, not a chart)."""

    def __init__(self, name: str, objects: list[dict[str, Any]], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("grpo-infra:nodepools:RdmaDevicePlugin", name, None, opts)
        config, daemonset = objects
        child = pulumi.ResourceOptions(parent=self)
        self.config = k8s.core.v1.ConfigMap(name, metadata=config["metadata"], data=config["data"], opts=child)
        self.daemonset = k8s.apps.v1.DaemonSet(
            name,
            metadata=daemonset["metadata"],
            spec=daemonset["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config]),
        )
        self.register_outputs({"daemonSet": f"{daemonset['metadata']['namespace']}/{daemonset['metadata']['name']}"})


class GpuDevicePlugins(pulumi.ComponentResource):
    """The Helm releases that advertise the pools' GPUs and fabric to the scheduler."""

    def __init__(self, name: str, releases: list[dict[str, Any]], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("grpo-infra:nodepools:GpuDevicePlugins", name, None, opts)
        self.releases = [
            k8s.helm.v3.Release(
                release["name"],
                name=release["name"],
                namespace=release["namespace"],
                create_namespace=release["createNamespace"],
                chart=release["chart"],
                version=release["version"],
                repository_opts={"repo": release["repository"]},
                values=release["values"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            for release in releases
        ]
        self.register_outputs({"releases": {r["name"]: f"{r['chart']} {r['version']}" for r in releases}})


def deploy_node_pools(env: Environment) -> list[pulumi.Resource]:
    """Create (or claim) every pool's nodes, the head pool's too where the stack creates them
    (grpo_infra/nodepools/resources.py), and their device plugins; return what workloads wait for."""
    try:
        planned = all_pool_resources(env, utc_now())
    except render.NodePoolError as exc:
        raise pulumi.RunError(f"{stack_source(pulumi.get_stack())}: {exc}") from None
    pools: list[pulumi.Resource] = []
    for resources in planned:
        if resources.node_group is not None:
            args = EksGpuNodeGroupArgs(resources.node_group, resources.launch_template, resources.schedule)
            pools.append(EksGpuNodeGroup(resources.name, args))
        elif resources.node_pool is not None:
            pools.append(GkeGpuNodePool(resources.name, GkeGpuNodePoolArgs(resources.node_pool)))
        else:
            pools.append(ExistingNodePool(resources.name, ExistingNodePoolArgs(list(resources.node_patches))))
    releases = render.device_plugin_releases(env)
    if releases:
        pools.append(GpuDevicePlugins("gpu-device-plugins", releases))
    rdma = render.rdma_device_plugin_objects(env)
    if rdma:
        pools.append(RdmaDevicePlugin("rdma-shared-device-plugin", rdma))
    return pools
