"""Kubernetes components: register exactly the objects and Helm releases the renderers produce.

Dependencies are explicit so that `pulumi up` creates, and `pulumi destroy` deletes, in an order the
operators can follow: node pools → operators → queues → RayJob on the way up, the reverse on the way
down, so the RayJob and the queues are deleted while KubeRay and Kueue, which own their finalizers,
still run.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import _utilities as k8s_utilities

from grpo_infra import k8s as render
from grpo_infra.k8s.access import SecretReference, ray_network_policy, secret_metadata
from grpo_infra.k8s.gate import gate_config_map
from grpo_infra.k8s.labels import ray_token_secret_name
from grpo_infra.k8s.operators import chart_path, kuberay_release, kueue_release, kueue_role_patches, uses_kueue
from grpo_infra.k8s.rayjob import dashboard_command, dashboard_token_command
from grpo_infra.k8s.shipped import guard_config_map, resume_config_map
from grpo_infra.spec import PROJECT, Environment

PREFIX = "grpo-infra:k8s"


def _name(obj: dict[str, Any]) -> str:
    """A Pulumi resource name unique per kind: `<namespace>-<name>` for namespaced objects."""
    meta = obj["metadata"]
    return f"{meta['namespace']}-{meta['name']}" if meta.get("namespace") else meta["name"]


def register_object(obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """One rendered object as a Pulumi resource: typed classes for core kinds, CustomResource otherwise."""
    kind, meta, name = obj["kind"], obj["metadata"], _name(obj)
    if kind == "Namespace":
        return k8s.core.v1.Namespace(name, metadata=meta, opts=opts)
    if kind == "ServiceAccount":
        return k8s.core.v1.ServiceAccount(name, metadata=meta, opts=opts)
    if kind == "Role":
        return k8s.rbac.v1.Role(name, metadata=meta, rules=obj["rules"], opts=opts)
    if kind == "RoleBinding":
        return k8s.rbac.v1.RoleBinding(
            name, metadata=meta, role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts
        )
    if kind == "NetworkPolicy":
        return k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=obj["data"], opts=opts)
    return RenderedCustomResource(name, obj, opts)


class RenderedCustomResource(k8s.apiextensions.CustomResource):
    """A custom resource registered whole, top-level fields included (a WorkloadPriorityClass has
    `value`, not `spec`), where `CustomResource`'s constructor only takes `spec`."""

    def __init__(self, name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s_utilities.get_version()))
        pulumi.CustomResource.__init__(self, f"kubernetes:{obj['apiVersion']}:{obj['kind']}", name, dict(obj), opts)


@dataclass(frozen=True)
class HelmReleaseArgs:
    """A rendered Helm release: chart, repository (None for an OCI chart), version, namespace, values."""

    name: str
    chart: str
    repository: str | None
    version: str
    namespace: str
    values: dict[str, Any]

    @classmethod
    def of(cls, release: dict[str, Any]) -> HelmReleaseArgs:
        return cls(**release)


def _child(
    parent: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None, *after: pulumi.Resource
) -> pulumi.ResourceOptions:
    """Options for a child: parented, and waiting for what the component waits for (children do not
    inherit a parent's dependencies, and `pulumi destroy` orders by these explicit edges)."""
    inherited = list(opts.depends_on or []) if opts is not None and isinstance(opts.depends_on, list) else []
    return pulumi.ResourceOptions(parent=parent, depends_on=[*inherited, *after])


class _Operator(pulumi.ComponentResource):
    """An operator: its namespace and its pinned Helm release (CRDs from the chart)."""

    TYPE = ""

    def __init__(self, name: str, args: HelmReleaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(self.TYPE, name, None, opts)
        self.namespace = k8s.core.v1.Namespace(
            args.namespace,
            metadata={"name": args.namespace, "labels": dict(render.namespaces.MANAGED_BY)},
            opts=_child(self, opts),
        )
        repository = k8s.helm.v3.RepositoryOptsArgs(repo=args.repository) if args.repository else None
        self.release = k8s.helm.v3.Release(
            args.name,
            name=args.name,
            # A bundled chart is rendered by its place in the project; Helm gets the file on this machine.
            chart=chart_path(args.chart),
            version=args.version,
            repository_opts=repository,
            namespace=args.namespace,
            values=args.values,
            # The operator must be serving (webhooks, CRDs) before anything that needs it is created.
            wait_for_jobs=True,
            atomic=True,
            opts=_child(self, opts, self.namespace),
        )
        self.after_release(opts)
        self.register_outputs({"namespace": args.namespace, "release": args.name, "version": args.version})

    def after_release(self, opts: pulumi.ResourceOptions | None) -> None:
        """What the operator adds to its chart's objects (nothing by default)."""


class KubeRayOperator(_Operator):
    """KubeRay's operator chart; it owns the RayJob's and RayCluster's finalizers."""

    TYPE = f"{PREFIX}:KubeRayOperator"


class Kueue(_Operator):
    """Kueue's chart with the complete manager configuration; it owns the queues' finalizers. Its aggregated
    ClusterRoles lose their aggregation rule before the chart is uninstalled (`kueue_role_patches`)."""

    TYPE = f"{PREFIX}:Kueue"

    def after_release(self, opts: pulumi.ResourceOptions | None) -> None:
        # After the release, so `pulumi destroy` removes each patch (the rule with it) before the release.
        self.role_patches = [
            k8s.rbac.v1.ClusterRolePatch(
                patch["metadata"]["name"],
                metadata=patch["metadata"],
                aggregation_rule=patch["aggregationRule"],
                opts=_child(self, opts, self.release),
            )
            for patch in kueue_role_patches()
        ]


@dataclass(frozen=True)
class TenantAccessArgs:
    """Namespaces, service accounts and roles of the tenants, and the Secrets the job reads."""

    objects: list[dict[str, Any]]
    secrets: list[SecretReference]

    @classmethod
    def of(cls, env: Environment) -> TenantAccessArgs:
        return cls([*render.tenant_namespaces(env), *render.tenant_access(env)], render.secret_references(env))


class TenantAccess(pulumi.ComponentResource):
    """Tenant namespaces with their RayJob-only roles, and one Secret per `secure:` config value."""

    def __init__(self, name: str, args: TenantAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PREFIX}:TenantAccess", name, None, opts)
        self.namespaces: dict[str, pulumi.CustomResource] = {}
        self.resources: list[pulumi.CustomResource] = []
        for obj in args.objects:
            ns = obj["metadata"].get("namespace")
            after = [self.namespaces[ns]] if ns in self.namespaces else []
            resource = register_object(obj, _child(self, opts, *after))
            if obj["kind"] == "Namespace":
                self.namespaces[obj["metadata"]["name"]] = resource
            self.resources.append(resource)
        config = pulumi.Config(PROJECT)
        self.secrets = [
            k8s.core.v1.Secret(
                f"{ref.namespace}-{ref.name}",
                metadata=secret_metadata(ref),
                type="Opaque",
                string_data={ref.key: config.require_secret(ref.config)},
                opts=_child(self, opts, self.namespaces[ref.namespace]),
            )
            for ref in args.secrets
        ]
        self.register_outputs(
            {"namespaces": sorted(self.namespaces), "secrets": [f"{r.namespace}/{r.name}" for r in args.secrets]}
        )


@dataclass(frozen=True)
class GangQueuesArgs:
    """Priority classes, topology, flavors, ClusterQueues and LocalQueues (or Volcano queues)."""

    objects: list[dict[str, Any]]

    @classmethod
    def of(cls, env: Environment) -> GangQueuesArgs:
        return cls([*render.queue_objects(env), *render.cron_queues(env)])


class GangQueues(pulumi.ComponentResource):
    """The queues gangs are admitted through; each waits for what it refers to."""

    def __init__(self, name: str, args: GangQueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PREFIX}:GangQueues", name, None, opts)
        made: dict[str, list[pulumi.CustomResource]] = {}
        # A kind waits for the kinds it names: flavors → topology, ClusterQueues → flavors, LocalQueues → ClusterQueues.
        needs = {"ResourceFlavor": ["Topology"], "ClusterQueue": ["ResourceFlavor"], "LocalQueue": ["ClusterQueue"]}
        for obj in args.objects:
            after = [r for kind in needs.get(obj["kind"], []) for r in made.get(kind, [])]
            resource = register_object(obj, _child(self, opts, *after))
            made.setdefault(obj["kind"], []).append(resource)
        self.resources = [r for rs in made.values() for r in rs]
        names = [f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}".lstrip("/") for o in args.objects]
        self.register_outputs({"queues": names})


@dataclass(frozen=True)
class GrpoRayJobArgs:
    """The job's Ray object (a RayJob, RayCluster or RayCronJob by `job.kind`), the NetworkPolicy fencing
    its Ray pods, the fabric gate's code (None when off) and the image guard's program."""

    ray_job: dict[str, Any]
    network_policy: dict[str, Any]
    gate_code: dict[str, Any] | None = None
    # The Ray token Secret's name (`authOptions.secretName`), None with `rayAuth: disabled`.
    token_secret: str | None = None
    # No voluntary eviction of the job's pods (`grpo_infra.k8s.disruption`).
    disruption_budget: dict[str, Any] | None = None
    # The image guard's program, mounted by the init container of every Ray pod (`grpo_infra.k8s.shipped`).
    guard_code: dict[str, Any] | None = None
    # The resume rule's program and the experiment's identity, mounted on the head (`grpo_infra.k8s.shipped`).
    resume_code: dict[str, Any] | None = None

    @classmethod
    def of(cls, env: Environment) -> GrpoRayJobArgs:
        assert env.kubernetes is not None
        token = ray_token_secret_name(env) if env.kubernetes.ray_job.ray_auth == "token" else None
        return cls(
            render.workload(env),
            ray_network_policy(env),
            gate_config_map(env),
            token,
            render.pod_disruption_budget(env),
            guard_config_map(env),
            resume_config_map(env),
        )


class GrpoRayJob(pulumi.ComponentResource):
    """The suspended GRPO RayJob (or RayCluster, or RayCronJob): Kueue flips `spec.suspend` on admission and
    Pulumi leaves it alone. One component type for every kind, so switching `job.kind` replaces the Ray
    object and nothing else."""

    def __init__(self, name: str, args: GrpoRayJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PREFIX}:GrpoRayJob", name, None, opts)
        self.network_policy = register_object(args.network_policy, _child(self, opts))
        # The head pod mounts the gate's code: the ConfigMap exists before the RayJob and outlives it.
        self.gate_code = register_object(args.gate_code, _child(self, opts)) if args.gate_code else None
        # Every Ray pod's init container mounts the guard's program: likewise before the Ray object. Its name
        # carries the program's hash, so a guard change creates the new one, updates the Ray object, then
        # deletes the old one.
        self.guard_code = register_object(args.guard_code, _child(self, opts)) if args.guard_code else None
        # The head runs the driver under the resume rule from this ConfigMap (named by its files' hash as well).
        self.resume_code = register_object(args.resume_code, _child(self, opts)) if args.resume_code else None
        # In place before the pods exist, so no drain can catch the gang between its start and the budget.
        budget = args.disruption_budget
        self.disruption_budget = register_object(budget, _child(self, opts)) if budget else None
        meta = args.ray_job["metadata"]
        self.token = None
        if args.token_secret is not None:
            # A random token made once: later runs of the program make another, which ignore_changes
            # drops, so the Secret (and every Ray pod reading it) keeps the first. Its value lives only in
            # Pulumi's encrypted state and the cluster.
            self.token = k8s.core.v1.Secret(
                f"{meta['namespace']}-{args.token_secret}",
                metadata={
                    "name": args.token_secret,
                    "namespace": meta["namespace"],
                    "labels": dict(render.namespaces.MANAGED_BY),
                },
                type="Opaque",
                string_data={"auth_token": pulumi.Output.secret(secrets.token_urlsafe(32))},
                opts=pulumi.ResourceOptions.merge(
                    _child(self, opts), pulumi.ResourceOptions(ignore_changes=["stringData", "data"])
                ),
            )
        after = [
            self.network_policy,
            *([self.gate_code] if self.gate_code is not None else []),
            *([self.guard_code] if self.guard_code is not None else []),
            *([self.resume_code] if self.resume_code is not None else []),
            *([self.token] if self.token is not None else []),
            *([self.disruption_budget] if self.disruption_budget is not None else []),
        ]
        self.ray_job = register_object(
            args.ray_job,
            pulumi.ResourceOptions.merge(
                _child(self, opts, *after), pulumi.ResourceOptions(ignore_changes=["spec.suspend"])
            ),
        )
        outputs = {"name": meta["name"], "namespace": meta["namespace"]}
        if args.gate_code is not None:
            outputs["gateCode"] = args.gate_code["metadata"]["name"]
        if args.guard_code is not None:
            outputs["guardCode"] = args.guard_code["metadata"]["name"]
        if args.resume_code is not None:
            outputs["resumeCode"] = args.resume_code["metadata"]["name"]
        self.register_outputs(outputs)


def deploy_kubernetes(env: Environment, depends_on: list[pulumi.Resource], install_operators: bool = True) -> None:
    """Operators, tenants, queues and the RayJob, each waiting for what it needs.

    `install_operators=False` is for a cluster that already runs KubeRay and Kueue with their CRDs
    (the local cluster of `grpo-infra kube up` runs them as processes): their charts are skipped.
    """
    # Operators wait for the node pools, so `pulumi destroy` removes them before the pools: the pools'
    # nodes outlive the operators that drain the finalizers of what ran on them.
    after_pools = pulumi.ResourceOptions(depends_on=list(depends_on))
    operators: list[pulumi.Resource] = []
    if install_operators:
        operators.append(KubeRayOperator("kuberay", HelmReleaseArgs.of(kuberay_release(env)), after_pools))
        if uses_kueue(env):
            operators.append(Kueue("kueue", HelmReleaseArgs.of(kueue_release(env)), after_pools))
    tenants = TenantAccess("tenants", TenantAccessArgs.of(env))
    # Queues need Kueue's CRDs and webhooks, and the tenant namespaces for LocalQueues.
    queues = GangQueues("queues", GangQueuesArgs.of(env), pulumi.ResourceOptions(depends_on=[*operators, tenants]))
    # The job needs every operator, its queue, its secrets and the nodes its pods are scheduled onto.
    job = GrpoRayJob(
        env.job.name,
        GrpoRayJobArgs.of(env),
        pulumi.ResourceOptions(depends_on=[*operators, queues, tenants, *depends_on]),
    )
    pulumi.export("namespaces", [t.name for t in env.tenants])
    pulumi.export("localQueues", {t.name: t.queue for t in env.tenants})
    pulumi.export("clusterQueues", [render.queues.cluster_queue_name(t) for t in env.tenants])
    # `rayJob`, `rayCluster` or `rayCronJob`: the job's Ray object, by `job.kind`.
    output = {"rayjob": "rayJob", "raycluster": "rayCluster", "raycronjob": "rayCronJob"}[env.job.kind]
    pulumi.export(output, job.ray_job.metadata.apply(lambda m: f"{m['namespace']}/{m['name']}"))
    if env.job.kind == "raycluster":
        pulumi.export("submit", f"grpo-infra submit {pulumi.get_stack()}")
    pulumi.export("dashboard", dashboard_command(env))
    token = dashboard_token_command(env)
    if token is not None:
        pulumi.export("dashboardToken", token)
