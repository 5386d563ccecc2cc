"""A rehearsal follows each kind to the end its kind promises (grpo_infra/rehearsal/kinds.py): what it changes
for a RayCronJob (its schedule, said), what the tenant's documented steps are per kind, and the tenant's own
kubeconfig for `grpo-infra submit`. On real nodes: `grpo-infra rehearse STACK` of a raycluster or raycronjob
stack (docs/rehearsal.md, "Every kind")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_infra.kube.plan import Paths
from grpo_infra.rehearsal import kinds, tenant
from grpo_infra.rehearsal.plan import CRON_SCHEDULE, rehearsal
from grpo_infra.spec import Environment, load_stack
from tests.conftest import ROOT


def of_kind(stack: str, kind: str, **settings: Any) -> Environment:
    data = load_stack(stack, ROOT).environment.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["job"]["kind"] = kind
    if kind == "raycronjob":
        data["kubernetes"]["rayCronJob"] = settings
    return Environment.model_validate(data)


def test_a_raycronjob_ticks_every_minute_in_a_rehearsal_and_says_what_it_replaced() -> None:
    env = of_kind("gke-dev", "raycronjob", schedule="0 2 * * 1", timeZone="Europe/Paris", suspend=True)
    planned = rehearsal("gke-dev", env)
    cron = planned.env.kubernetes.ray_cron_job  # type: ignore[union-attr]
    assert cron is not None and (cron.schedule, cron.time_zone, cron.suspend) == (CRON_SCHEDULE, None, False)
    (sub,) = [s for s in planned.substitutions if s.what == "schedule"]
    assert sub.line() == (
        "schedule: 0 2 * * 1 (Europe/Paris), suspended -> every minute (* * * * *); the first tick's run followed"
    )


def test_other_kinds_keep_their_schedule_free_plan() -> None:
    for kind in ("rayjob", "raycluster"):
        planned = rehearsal("gke-dev", of_kind("gke-dev", kind))
        assert not [s for s in planned.substitutions if s.what == "schedule"]


def test_the_tenants_steps_follow_the_kind() -> None:
    cluster_steps = [s.line() for s in tenant.steps(of_kind("gke-dev", "raycluster"), "wl")]
    assert not [line for line in cluster_steps if " logs job/" in line], "a RayCluster has no submitter"
    assert "kubectl -n dev patch workload wl --type merge -p " + tenant.REACTIVATE in cluster_steps
    cron_steps = [s.line() for s in tenant.steps(of_kind("gke-dev", "raycronjob", schedule="@daily"), "wl", "x-29")]
    assert "kubectl -n dev logs job/x-29 --tail=1" in cron_steps, "the tick's own run"


def test_submit_runs_with_the_tenants_own_identity(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "cluster")
    paths.root.mkdir()
    admin = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": "admin", "user": {"client-certificate": "/pki/admin.crt"}}],
    }
    paths.kubeconfig.write_text(yaml.safe_dump(admin))
    written = kinds.tenant_kubeconfig(paths, "dev", tmp_path / "tenant.kubeconfig")
    config = yaml.safe_load(written.read_text())
    assert config["users"][0]["user"]["as"] == "system:serviceaccount:dev:grpo-submitter"
    assert written.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(paths.kubeconfig.read_text()) == admin, "the administrator's kubeconfig is untouched"


def test_the_rehearsals_project_holds_its_one_stack(tmp_path: Path) -> None:
    (tmp_path / "stacks" / "locks").mkdir(parents=True)
    (tmp_path / "stacks" / "Pulumi.gke-dev.yaml").write_text("config: {}\n")
    assert kinds.env_stack(tmp_path) == "gke-dev"
