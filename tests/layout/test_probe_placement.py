"""The probe of a disaggregated job against a real Ray 2.60 cluster of five raylets on this machine (a CPU
head, two nodes of a pool of 2 GPUs each, two of a pool of 1), the GPUs declared to Ray as the local
Kubernetes' device plugin declares them to the pods: it places the roles as verl 0.9.1 does (GPU count only,
trainer first) and every rank lands on its role's pool, which is what `check`'s `layout-placement` rule
relies on; and a rank off its role's pool fails the probe, naming it.

About 45 s on two cores; no root, no Kubernetes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import probe, probe_report
from grpo_infra.probe import POOL_RESOURCE_PREFIX

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        for gpus, pool in ((2, "big"), (2, "big"), (1, "small"), (1, "small")):
            cluster.add_node(num_cpus=1, num_gpus=gpus, resources={f"{POOL_RESOURCE_PREFIX}{pool}": gpus})
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()


def _run(address: str, roles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    argv = ["--address", address, "--head-apart", "--checkpoint-dir", str(tmp_path), "--steps", "1"]
    try:
        rc = probe.main(argv + [f"--role={r}" for r in roles])
    finally:
        ray.shutdown()
    return rc, capsys.readouterr()


def test_every_rank_lands_on_its_roles_pool_when_the_trainers_nodes_are_the_widest(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _run(address, ["trainer=2x2@big", "rollout=2x1@small"], tmp_path, capsys)
    assert rc == 0, out.err
    (placement,) = [e for e in probe_report.events(out.out) if e["event"] == "placement"]
    assert [(r["role"], r["pool"]) for r in placement["ranks"]] == [("trainer", "big")] * 4 + [("rollout", "small")] * 2
    # Each trainer node holds a whole placement group (STRICT_PACK): two nodes, two ranks each.
    trainer_nodes = [r["ray_node_id"] for r in placement["ranks"][:4]]
    assert len(set(trainer_nodes)) == 2 and all(trainer_nodes.count(n) == 2 for n in trainer_nodes)


def test_a_rank_off_its_roles_pool_fails_the_probe_naming_it(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _run(address, ["trainer=2x2@small", "rollout=2x1@big"], tmp_path, capsys)
    assert rc == 1
    assert "probe: rank 0 of role trainer ran on node" in out.err and "of pool big, not small" in out.err


def test_a_role_whose_nodes_lack_its_gpus_in_ray_fails_naming_the_role_and_what_ray_counted(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a worker that joined Ray without its GPUs looks like to verl: a placement group that never fits.
    The probe says which role, which pool, and the GPUs Ray counted there (the rehearsal of gke-disagg
    before KubeRay set the workers' GPU count: every worker at 0)."""
    rc, out = _run(address, ["trainer=2x2@big", "rollout=2x2@small"], tmp_path, capsys)
    assert rc == 1
    assert re.search(
        r"^probe: FAIL role rollout needs 2 node\(s\) of pool small with 2 GPUs in Ray; Ray's nodes of that pool "
        r"\(address, GPUs\): [\d.]+ 1, [\d.]+ 1$",
        out.err,
        re.MULTILINE,
    ), out.err
