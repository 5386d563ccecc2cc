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
    # The token Secret has a fixed name, so the tenant's Role can grant `get` on it alone; its value is
    # Pulumi's, never rendered.
    assert cluster["authOptions"] == {"mode": "token", "secretName": f"{env.job.name}-ray-token"}
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


def test_tenants_read_only_their_jobs_ray_token() -> None:
    env = env_of("onprem-k8s")
    roles = {r["metadata"]["namespace"]: r for r in by_kind(objects(env), "Role")}
    secret_rules = {ns: [r for r in role["rules"] if "secrets" in r["resources"]] for ns, role in roles.items()}
    # rl-team runs the job: its token, by name, get only. eval-team runs none here: no Secret at all
    # (not the HF token, which reaches the pods through secretKeyRef without any RBAC of the tenant's).
    assert secret_rules == {
        "rl-team": [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": ["grpo-llama31-8b-ray-token"],
                "verbs": ["get"],
            }
        ],
        "eval-team": [],
    }


def test_dashboard_and_token_commands() -> None:
    env = env_of("eks-prod")
    ns, name = env.job.tenant, env.job.name
    forward = dashboard_command(env)
    assert forward.startswith(f"kubectl -n {ns} port-forward ") and forward.endswith(" 8265:8265")
    token = dashboard_token_command(env)
    assert token is not None
    assert token == f"kubectl -n {ns} get secret {name}-ray-token -o jsonpath='{{.data.auth_token}}' | base64 -d"


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_stack_outputs_tell_how_to_reach_the_dashboard(stack: str) -> None:
    """Written out by hand: KubeRay labels the head pod `ray.io/node-type=head`; the stack's own token
    Secret is `<job>-ray-token` (KubeRay's `authOptions.secretName`), key `auth_token`; the job's pods
    carry `grpo-infra/job=<job>`."""
    env = env_of(stack)
    ns, job = env.job.tenant, env.job.name
    out = record(stack, ROOT).outputs
    assert out["dashboard"] == (
        f"kubectl -n {ns} port-forward $(kubectl -n {ns} get pod -l grpo-infra/job={job},ray.io/node-type=head"
        " -o name) 8265:8265"
    )
    assert out["dashboardToken"] == (
        f"kubectl -n {ns} get secret {job}-ray-token -o jsonpath='{{.data.auth_token}}' | base64 -d"
    )
