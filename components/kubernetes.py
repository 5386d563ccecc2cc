"""Kubernetes components: register the objects the renderers produce."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from grpo_infra import k8s as render
from grpo_infra.spec import Environment


class TenantNamespaces(pulumi.ComponentResource):
    """The tenants' namespaces, as rendered."""

    def __init__(self, name: str, env: Environment, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("grpo-infra:k8s:TenantNamespaces", name, None, opts)
        self.namespaces = [
            k8s.core.v1.Namespace(
                obj["metadata"]["name"],
                metadata=obj["metadata"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            for obj in render.tenant_namespaces(env)
        ]
        self.register_outputs({"namespaces": [ns.metadata["name"] for ns in self.namespaces]})


def deploy_kubernetes(env: Environment, depends_on: list[pulumi.Resource]) -> None:
    namespaces = TenantNamespaces("tenants", env, pulumi.ResourceOptions(depends_on=depends_on))
    pulumi.export("namespaces", [t.name for t in env.tenants])
    pulumi.export("job", env.job.name)
    del namespaces
