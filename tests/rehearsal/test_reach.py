"""The NetworkPolicy try of a rehearsal (grpo_infra/rehearsal/reach.py): which namespaces try the head, and the
one line a user reads when the policy lets through what it must refuse, or refuses what it must let through.
On real nodes: tests/kube/test_rehearse.py (gke-disagg, whose policy admits gmp-system's scrapers)."""

from __future__ import annotations

import pytest

from grpo_infra.rehearsal import reach
from grpo_infra.spec import load_stack
from tests.conftest import ROOT

POLICY = "dev/grpo-qwen25-3b-disagg-ray"


@pytest.fixture(scope="module")
def gke_disagg_clients() -> list[reach.Client]:
    return reach.clients(load_stack("gke-disagg", ROOT).environment, "grpo-cpu-0", "grpo-cpu-1")


def by_namespace(clients: list[reach.Client]) -> dict[str, reach.Client]:
    return {c.namespace: c for c in clients}


def test_the_jobs_namespace_a_stranger_beside_the_head_and_the_monitoring_namespace_try_it(
    gke_disagg_clients: list[reach.Client],
) -> None:
    clients = by_namespace(gke_disagg_clients)
    assert clients["dev"].allowed == {6379, 8080, 8265} and clients["dev"].node == "grpo-cpu-1"
    assert clients[reach.STRANGER].allowed == set() and clients[reach.STRANGER].node == "grpo-cpu-0"
    assert clients["gmp-system"].allowed == {8080} and clients["gmp-system"].node == "grpo-cpu-1"


def test_a_stack_without_a_monitoring_namespace_is_tried_from_its_own_and_a_strangers() -> None:
    env = load_stack("eks-prod", ROOT).environment
    assert [c.namespace for c in reach.clients(env, "a", "b")] == ["post-training", reach.STRANGER]


def test_the_client_prints_one_outcome_per_port_which_parse_reads() -> None:
    log = "6379 refused\nnc: can't connect to remote host (10.244.1.2): Connection refused\n8080 connected\n8265 timed-out\n"
    assert reach.parse(log) == {6379: "refused", 8080: "connected", 8265: "timed-out"}


def test_a_policy_as_rendered_passes(gke_disagg_clients: list[reach.Client]) -> None:
    clients = by_namespace(gke_disagg_clients)
    every = {6379: "connected", 8080: "connected", 8265: "connected"}
    assert reach.verdict(clients["dev"], every, POLICY) is None
    assert reach.verdict(clients[reach.STRANGER], {p: "refused" for p in every}, POLICY) is None
    assert reach.verdict(clients["gmp-system"], {6379: "timed-out", 8080: "connected", 8265: "refused"}, POLICY) is None


def test_a_stranger_that_connects_fails_naming_the_namespace_and_the_port(
    gke_disagg_clients: list[reach.Client],
) -> None:
    stranger = by_namespace(gke_disagg_clients)[reach.STRANGER]
    line = reach.verdict(stranger, {6379: "connected", 8080: "refused", 8265: "refused"}, POLICY)
    assert line == (
        f"NetworkPolicy {POLICY}: a pod of namespace grpo-rehearsal-stranger (a namespace the policy does not name) "
        "must not reach the head's port 6379 (GCS), and the connection was connected"
    )


def test_a_monitoring_namespace_refused_the_metrics_port_fails_naming_the_field(
    gke_disagg_clients: list[reach.Client],
) -> None:
    monitoring = by_namespace(gke_disagg_clients)["gmp-system"]
    line = reach.verdict(monitoring, {6379: "refused", 8080: "refused", 8265: "refused"}, POLICY)
    assert line is not None
    assert "namespace gmp-system (kubernetes.monitoringNamespace) must reach the head's port 8080 (metrics)" in line


def test_a_port_the_client_never_tried_is_a_failure_not_a_pass(gke_disagg_clients: list[reach.Client]) -> None:
    stranger = by_namespace(gke_disagg_clients)[reach.STRANGER]
    line = reach.verdict(stranger, {6379: "refused"}, POLICY)
    assert line is not None and "port 8080 (metrics), and the connection was not tried" in line
