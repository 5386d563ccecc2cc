"""The versions we install and the versions we validate against are the same ones."""

from __future__ import annotations

from importlib.metadata import version

from grpo_infra.k8s.operators import KUBERAY_VERSION, KUEUE_VERSION
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
