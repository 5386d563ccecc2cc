"""Every rendered object validates as the cluster would check it: CRDs closed + CEL, core kinds strict."""

from __future__ import annotations

import copy
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.k8s import objects
from grpo_infra.validate import crds, validate_objects
from grpo_infra.validate.schema import closed

from .conftest import K8S_STACKS, by_kind, env_of, variant


def test_the_three_kubernetes_stacks_are_covered() -> None:
    assert {"eks-prod", "gke-dev", "onprem-k8s"} <= set(K8S_STACKS)


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_every_rendered_object_validates(stack: str) -> None:
    rendered = objects(env_of(stack))
    kinds = {o["kind"] for o in rendered}
    assert {"RayJob", "ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", "Namespace"} <= kinds
    assert validate_objects(rendered) == []


def test_volcano_variant_has_no_kueue_objects_and_validates() -> None:
    env = variant("onprem-k8s", lambda raw: raw["kubernetes"].update(scheduler="volcano"))
    rendered = objects(env)
    assert not [o for o in rendered if o["apiVersion"].startswith("kueue.x-k8s.io")]
    job = by_kind(rendered, "RayJob")[0]
    assert job["metadata"]["labels"]["ray.io/scheduler-name"] == "volcano"
    assert job["metadata"]["labels"]["volcano.sh/queue-name"] == "rl-team"
    assert job["spec"]["suspend"] is False  # nobody would unsuspend it
    assert validate_objects(rendered) == []


def test_topology_renders_a_topology_and_flavor_reference() -> None:
    rendered = objects(env_of("eks-prod"))
    topology = by_kind(rendered, "Topology")[0]
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]][-1] == "kubernetes.io/hostname"
    flavor = next(f for f in by_kind(rendered, "ResourceFlavor") if f["metadata"]["name"] == "h100-efa")
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]


def _rayjob(stack: str = "onprem-k8s") -> dict[str, Any]:
    return copy.deepcopy(by_kind(objects(env_of(stack)), "RayJob")[0])


def test_a_misspelled_field_deep_in_the_rayjob_fails() -> None:
    job = _rayjob()
    container = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    errors = validate_objects([job])
    assert any("'volumeMount' was unexpected" in e for e in errors), errors


def test_a_misspelled_top_level_spec_field_fails() -> None:
    job = _rayjob()
    job["spec"]["shutdownAfterJobFinish"] = job["spec"].pop("shutdownAfterJobFinishes")
    errors = validate_objects([job])
    assert any("shutdownAfterJobFinish' was unexpected" in e for e in errors), errors
    assert any("shutdownAfterJobFinishes" in e for e in errors), errors  # Kueue's rule, ours


def test_cel_rules_are_evaluated() -> None:
    flavor = copy.deepcopy(by_kind(objects(env_of("eks-prod")), "ResourceFlavor")[0])
    flavor["spec"]["nodeLabels"] = {}
    errors = validate_objects([flavor])
    assert any("nodeLabel is required when topology is set" in e for e in errors), errors


def test_cel_rule_on_clusterqueue_borrowing_without_cohort() -> None:
    queue = copy.deepcopy(by_kind(objects(env_of("onprem-k8s")), "ClusterQueue")[0])
    del queue["spec"]["cohortName"]
    # The CRD's x-kubernetes-validations message (kueue.x-k8s.io_clusterqueues.yaml, v0.19.2).
    assert validate_objects([queue]) == [
        f"clusterqueue.{queue['metadata']['name']}.yaml: spec: borrowingLimit must be nil when cohort is empty"
    ]


def test_core_objects_are_strict() -> None:
    role = copy.deepcopy(by_kind(objects(env_of("onprem-k8s")), "Role")[0])
    role["rules"][0]["verb"] = ["get"]
    errors = validate_objects([role])
    assert any("'verb' was unexpected" in e for e in errors), errors


def test_int_or_string_and_nullable_are_honoured() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "n": {"type": "string", "nullable": True},
        },
    }
    out = closed(schema, root=False)
    assert out["additionalProperties"] is False
    assert out["properties"]["n"]["type"] == ["string", "null"]
    assert {"type": "integer"} in out["properties"]["q"]["anyOf"]


def test_pinned_sums_match_the_shared_crds() -> None:
    for rel, digest in crds.pinned().items():
        path = crds.crd_path(rel) if rel.split("/")[0] in crds.BUNDLED else crds.SHARED / rel
        assert path.is_file(), f"{rel} missing from {crds.SHARED}"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, rel


class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_without_the_shared_folder_a_download_is_checked_against_the_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network here: the 'download' serves the shared bytes, then tampered bytes."""
    rel = "kueue-v0.19.2/kueue.x-k8s.io_topologies.yaml"
    real = (crds.SHARED / rel).read_bytes()
    asked: list[str] = []
    body = {"data": real}

    def fake_urlopen(url: str, timeout: float) -> _Response:
        asked.append(url)
        return _Response(body["data"])

    monkeypatch.setattr(crds, "SHARED", tmp_path / "absent")
    monkeypatch.setattr(crds, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(crds.urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(crds, "FETCH", False)
    with pytest.raises(crds.CrdUnavailable, match="GRPO_INFRA_FETCH_CRDS=1"):
        crds.crd_path(rel)
    assert asked == [], "nothing is fetched unless asked"
    monkeypatch.setattr(crds, "FETCH", True)
    assert crds.crd_path(rel).read_bytes() == real
    assert asked == [
        "https://raw.githubusercontent.com/kubernetes-sigs/kueue/v0.19.2/config/components/crd/bases/"
        "kueue.x-k8s.io_topologies.yaml"
    ]
    (tmp_path / "cache" / rel).unlink()
    body["data"] = real + b"\n# tampered\n"
    with pytest.raises(crds.CrdUnavailable, match="expected"):
        crds.crd_path(rel)
