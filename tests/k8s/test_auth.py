"""Ray token authentication on the RayJob's cluster, and how a person reaches the dashboard."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from grpo_infra.k8s import objects, ray_job
from grpo_infra.k8s.rayjob import dashboard_command, dashboard_token_command
from grpo_infra.pulumi_graph import record
from grpo_infra.spec.kubernetes import RAY_VERSION, RayJobSettings
from grpo_infra.validate import validate_objects
from tests.conftest import ROOT

from .conftest import K8S_STACKS, by_kind, env_of, variant


def _auth_off(raw: dict[str, Any]) -> None:
    raw["kubernetes"].setdefault("rayJob", {})["rayAuth"] = "disabled"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_token_auth_is_on_by_default_with_the_images_ray_version(stack: str) -> None:
    env = env_of(stack)
    cluster = ray_job(env)["spec"]["rayClusterSpec"]
    # No secretName: KubeRay generates the token Secret per RayCluster; nothing secret is rendered.
    assert cluster["authOptions"] == {"mode": "token"}
    assert cluster["rayVersion"] == env.image.contents.ray == RAY_VERSION
    assert "enableK8sTokenAuth" not in cluster["authOptions"], "KubeRay rejects it for RayJobs"
    assert "RAY_AUTH_TOKEN" not in str(ray_job(env)), "KubeRay injects the token variables itself"


def test_auth_can_be_switched_off_and_still_validates() -> None:
    env = variant("gke-dev", _auth_off)
    rendered = objects(env)
    assert by_kind(rendered, "RayJob")[0]["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "disabled"}
    assert dashboard_token_command(env) is None
    assert validate_objects(rendered) == []


def test_a_misspelled_auth_mode_fails_the_crd() -> None:
    job = by_kind(objects(env_of("gke-dev")), "RayJob")[0]
    job["spec"]["rayClusterSpec"]["authOptions"] = {"mode": "tokens"}
    assert any("authOptions" in e for e in validate_objects([job]))


@pytest.mark.parametrize("version", ["2.49.1", "2.51.9"])
def test_token_auth_with_a_ray_older_than_2_52_is_refused(version: str) -> None:
    with pytest.raises(ValidationError, match=r"rayAuth: token needs Ray >= 2\.52\.0.*rayAuth: disabled"):
        RayJobSettings.model_validate({"rayVersion": version})
    assert RayJobSettings.model_validate({"rayVersion": version, "rayAuth": "disabled"}).ray_auth == "disabled"
    assert RayJobSettings.model_validate({"rayVersion": "2.52.0"}).ray_auth == "token"


def test_tenants_can_read_the_token_by_name_only() -> None:
    env = env_of("onprem-k8s")
    for role in by_kind(objects(env), "Role"):
        secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
        assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def test_dashboard_and_token_commands() -> None:
    env = env_of("eks-prod")
    ns, name = env.job.tenant, env.job.name
    forward = dashboard_command(env)
    assert forward.startswith(f"kubectl -n {ns} port-forward ") and forward.endswith(" 8265:8265")
    token = dashboard_token_command(env)
    assert token is not None
    assert f"get rayjob {name} -o jsonpath='{{.status.rayClusterName}}'" in token
    assert token.endswith("-o jsonpath='{.data.auth_token}' | base64 -d")


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_stack_outputs_tell_how_to_reach_the_dashboard(stack: str) -> None:
    env = env_of(stack)
    out = record(stack, ROOT).outputs
    assert out["dashboard"] == dashboard_command(env)
    assert out["dashboardToken"] == dashboard_token_command(env)
