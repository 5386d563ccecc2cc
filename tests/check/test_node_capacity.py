"""Pods that fit: the worker is sized from the memory the kernel shows, not the machine's nominal size."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from grpo_infra.cli import app
from grpo_infra.k8s import objects
from grpo_infra.k8s.allocatable import (
    EVICTION_MEMORY_MI,
    MEASURED_CAPACITY,
    STRUCT_PAGE_SHARE,
    eks_max_pods,
    eks_memory_reserved_mi,
    gke_memory_reserved_mi,
    memory_capacity,
    node_allocatable,
)
from grpo_infra.k8s.placement import parse_quantity
from grpo_infra.nodepools.charts import daemonset_requests
from grpo_infra.spec import load_stack
from tests.check.test_check import ROOT

KUBERNETES_STACKS = ["eks-prod", "gke-dev", "onprem-k8s", "local-k8s"]


def _provider_reserve_mi(env, pool) -> int:
    """The provider's published reservation for one node of `pool`, from its nominal size alone."""
    provider = env.kubernetes.provider
    if provider == "gke":
        return gke_memory_reserved_mi(pool.memory_gib) + EVICTION_MEMORY_MI
    if provider == "eks":
        return eks_memory_reserved_mi(eks_max_pods(pool.eks.instance_type, pool.eks.max_pods)) + EVICTION_MEMORY_MI
    return int(env.kubernetes.node_reserve.memory_gib * 1024)


@pytest.mark.parametrize("stack", KUBERNETES_STACKS)
def test_no_worker_is_sized_from_the_nominal_memory(stack: str) -> None:
    """The rendered worker, the DaemonSets beside it, the provider's reservation and the stack's headroom
    together stay under what any x86-64 kernel can show: the nominal memory less the struct page array
    (64 B per 4 KiB page). A worker sized from the nominal memory breaks this by the whole array."""
    env = load_stack(stack, ROOT).environment
    pool = env.gang.pool
    job = next(o for o in objects(env) if o["kind"] == "RayJob")
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    asked_mi = parse_quantity(worker["resources"]["requests"]["memory"]) / 2**20
    daemons_mi = sum(d[2] for d in daemonset_requests(env, pool))
    headroom_mi = 0 if env.kubernetes.provider == "existing" else env.kubernetes.node_reserve.memory_gib * 1024
    ceiling_mi = pool.memory_gib * 1024 * (1 - STRUCT_PAGE_SHARE)
    used_mi = asked_mi + daemons_mi + _provider_reserve_mi(env, pool) + headroom_mi
    assert used_mi <= ceiling_mi, f"{stack}: {used_mi:.0f} MiB > {ceiling_mi:.0f} MiB the kernel can show at most"


def test_the_model_stays_under_the_published_measurement_of_n2_highmem_64() -> None:
    # 2i2c-org/infrastructure#2121 (GKE 1.25): capacity 528365196Ki, allocatable 510603916Ki (486.9 GiB).
    env = load_stack("gke-dev", ROOT).environment
    alloc = node_allocatable(env, 64, 512, "n2-highmem-64")
    measured_allocatable_mi = 510603916 / 1024
    assert alloc.memory_mi <= measured_allocatable_mi
    assert measured_allocatable_mi - alloc.memory_mi < 512  # conservative by less than 0.5 GiB
    # Sized from the nominal 512 GiB it would promise 8 GiB that no such node has.
    nominal = 512 * 1024 - gke_memory_reserved_mi(512) - EVICTION_MEMORY_MI
    assert nominal - measured_allocatable_mi > 7 * 1024


def test_every_measurement_is_below_its_nominal_size_and_above_the_margin() -> None:
    """The unmeasured margin covers every published measurement of a machine of 128 GiB or more."""
    from grpo_infra.k8s.allocatable import MACHINE_SHAPES, UNMEASURED_MARGIN

    for machine, (capacity, _) in MEASURED_CAPACITY.items():
        nominal = MACHINE_SHAPES[machine][1] * 2**30
        lost = 1 - capacity / nominal
        assert STRUCT_PAGE_SHARE < lost < 0.05, machine
        if nominal >= 128 * 2**30:
            assert lost < UNMEASURED_MARGIN, machine


def test_a_measured_kernel_memory_replaces_the_margin() -> None:
    assert memory_capacity(1536, None, 1510.5).capacity_mi == int(1510.5 * 1024)
    assert "margin" not in memory_capacity(512, "n2-highmem-64").source
    assert memory_capacity(512, "n2-highmem-64").capacity_mi == 528365196 // 1024


def test_kernel_memory_above_the_nominal_size_is_bad_input(tmp_path) -> None:
    text = (ROOT / "stacks" / "Pulumi.onprem-k8s.yaml").read_text()
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.onprem-k8s.yaml").write_text(
        text.replace("memoryGib: 1536\n", "memoryGib: 1536\n        kernelMemoryGib: 1600\n", 1)
    )
    result = CliRunner().invoke(app, ["check", "onprem-k8s", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "kernelMemoryGib 1600 exceeds memoryGib 1536" in result.output


def test_check_explain_prints_the_arithmetic_per_pool() -> None:
    result = CliRunner().invoke(app, ["check", "eks-prod", "--explain", "--root", str(ROOT)], env={"KUBECONFIG": ""})
    assert result.exit_code == 0, result.output
    out = result.output
    for step in (
        "nominal",
        "kernel-visible capacity",
        "EKS AL2023, maxPods 100",
        "eviction threshold",
        "DaemonSet nvidia-device-plugin",
        "nodeReserve (headroom)",
        "= worker request",
    ):
        assert step in out, step
    assert "2048.00 GiB" in out and "1989380Mi" in out
    assert "no published measurement of p5.48xlarge" in out
