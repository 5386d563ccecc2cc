"""The image guard's program ships once per job, in a ConfigMap its init containers mount: never inline in a
pod template, and a change of the program changes that ConfigMap and, in the Ray object, only its name."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

import grpo_infra.image
from grpo_infra.image import guard_program
from grpo_infra.image.dockerfile import GUARD_FILE
from grpo_infra.image.pods import VOLUME
from grpo_infra.k8s import objects, render_files, workload
from grpo_infra.k8s.shipped import guard_config_map, guard_config_map_name
from grpo_infra.manifests import object_filename
from grpo_infra.spec import Environment
from grpo_infra.spec.kubernetes import RESERVED_VOLUMES

from .conftest import K8S_STACKS, variant
from .test_kinds import as_kind

KINDS = ["rayjob", "raycluster", "raycronjob"]
# Lines of the program no other rendered text holds.
MARKERS = (
    "The runtime image guard: what the image really holds",
    "def verbs_devices() -> tuple[list[str] | None, str]:",
)


def _env(stack: str, kind: str) -> Environment:
    return variant(stack, as_kind(kind))


def _pod_templates(obj: Any) -> list[dict[str, Any]]:
    """Every pod template in a Ray object (head and worker groups, at any depth: a RayCronJob nests them)."""
    if isinstance(obj, dict):
        found = [obj["template"]] if "initContainers" in obj.get("template", {}).get("spec", {}) else []
        return found + [t for v in obj.values() for t in _pod_templates(v)]
    if isinstance(obj, list):
        return [t for v in obj for t in _pod_templates(v)]
    return []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stack", K8S_STACKS)
def test_the_program_is_rendered_once_in_the_jobs_configmap(stack: str, kind: str) -> None:
    env = _env(stack, kind)
    rendered = objects(env)
    code = guard_config_map(env)
    ray = workload(env)
    assert rendered.index(code) < rendered.index(ray), "the ConfigMap is applied before the pods that mount it"
    assert code["data"] == {GUARD_FILE: guard_program()}
    assert code["metadata"]["namespace"] == env.job.tenant
    assert code["metadata"]["labels"]["grpo-infra/job"] == env.job.name
    for marker in MARKERS:
        holders = [o["metadata"]["name"] for o in rendered if marker in json.dumps(o)]
        assert holders == [guard_config_map_name(env)], marker
        assert sum(text.count(marker) for text in render_files(env).values()) == 1, marker
    templates = _pod_templates(ray)
    assert len(templates) == 1 + len(env.role_gangs() or [env.gang])  # the head and each worker group
    for template in templates:
        (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == VOLUME]
        assert volume["configMap"]["name"] == code["metadata"]["name"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_guard_change_changes_the_configmap_and_one_line_per_pod_template(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env("eks-prod", kind)
    before, old_code = render_files(env), guard_config_map(env)
    changed = tmp_path / "guard.py"
    changed.write_text(guard_program() + "# changed\n", encoding="utf-8")
    monkeypatch.setattr(grpo_infra.image, "GUARD_PROGRAM", changed)
    after, new_code = render_files(env), guard_config_map(env)
    old, new = old_code["metadata"]["name"], new_code["metadata"]["name"]
    assert new != old and new_code["data"] == {GUARD_FILE: changed.read_text()}
    # The old ConfigMap's file goes, the new one's comes; of the other files only the Ray object's changes.
    assert before.keys() - after.keys() == {f"kubernetes/{object_filename(old_code)}"}
    assert after.keys() - before.keys() == {f"kubernetes/{object_filename(new_code)}"}
    ray = workload(env)
    path = f"kubernetes/{object_filename(ray)}"
    assert [k for k in sorted(before.keys() & after.keys()) if before[k] != after[k]] == [path]
    diff = difflib.unified_diff(before[path].splitlines(), after[path].splitlines(), n=0)
    lines = [line[0] + line[1:].strip() for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    # One line per pod template (head, workers): the volume's ConfigMap name, which ends in the program's hash.
    templates = len(_pod_templates(ray))
    assert sorted(lines) == [f"+name: {new}"] * templates + [f"-name: {old}"] * templates


def test_a_stack_cannot_name_a_volume_of_its_own_as_the_guards() -> None:
    assert VOLUME in RESERVED_VOLUMES

    def clash(raw: dict[str, Any]) -> None:
        raw["kubernetes"]["volumes"] = [{"name": VOLUME, "mountPath": "/data", "claimName": "data"}]

    with pytest.raises(ValueError, match="image-guard is a volume the project mounts itself"):
        variant("eks-prod", clash)
