"""The versions we install and the versions we validate against are the same ones."""

from __future__ import annotations

import re
import tarfile
from importlib.metadata import version

import yaml

from grpo_infra.k8s.operators import (
    KUBERAY_VERSION,
    KUEUE_AGGREGATED_ROLES,
    KUEUE_VERSION,
    bundled_chart,
    kueue_role_patches,
)
from grpo_infra.spec.kubernetes import RAY_VERSION
from grpo_infra.validate import crds


def test_the_crds_we_validate_against_are_the_charts_we_install() -> None:
    """Bumping a chart without its CRDs would validate new manifests against old schemas."""
    folders = {rel.split("/")[0] for rel in crds.pinned()}
    assert folders == {f"kuberay-v{KUBERAY_VERSION}", f"kueue-v{KUEUE_VERSION}"}
    assert set(crds.UPSTREAM) == folders
    assert all(
        f"/v{v}/" in crds.UPSTREAM[f]
        for f, v in ((f"kuberay-v{KUBERAY_VERSION}", KUBERAY_VERSION), (f"kueue-v{KUEUE_VERSION}", KUEUE_VERSION))
    )


def test_the_declared_ray_version_is_the_ray_we_test_with() -> None:
    """The RayJob declares the Ray of the sandbox and tests (pyproject's pin), so auth behaviour matches."""
    assert version("ray") == RAY_VERSION


def test_the_role_patches_take_over_exactly_the_bundled_charts_aggregated_roles() -> None:
    """`pulumi destroy` drops the aggregation rule of every aggregated ClusterRole the Kueue chart has, and each
    patch selects the same roles the chart's rule does (the same label, spelled as an expression)."""
    with tarfile.open(bundled_chart(f"kueue-{KUEUE_VERSION}.tgz")) as chart:
        templates = [
            chart.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in chart.getmembers()
            if m.isfile() and m.name.startswith("kueue/templates/")
        ]
    aggregated = {}
    for text in templates:
        if "aggregationRule:" in text:
            body = yaml.safe_load(
                re.sub(
                    r"\{\{.*?\}\}",
                    "",
                    flags=re.DOTALL,
                    string=text.replace('{{ include "kueue.fullname" . }}', "kueue"),
                )
            )
            [selector] = body["aggregationRule"]["clusterRoleSelectors"]
            aggregated[body["metadata"]["name"]] = selector["matchLabels"]
    patches = {p["metadata"]["name"]: p["aggregationRule"]["clusterRoleSelectors"] for p in kueue_role_patches()}
    assert set(patches) == set(aggregated) == set(KUEUE_AGGREGATED_ROLES)
    for name, [selector] in patches.items():
        [expression] = selector["matchExpressions"]
        assert {expression["key"]: expression["values"][0]} == aggregated[name] and expression["operator"] == "In"
        assert expression["values"] == ["true"]
