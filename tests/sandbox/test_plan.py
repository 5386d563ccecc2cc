"""The sandbox's plan, read without root: node names, its view of the stack, slurm.conf, hosts block."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_infra.sandbox.plan import (
    HOSTS_BEGIN,
    SandboxError,
    base_slurm_conf,
    device_paths,
    hosts_block,
    make_plan,
    node_names,
    resize_note,
    sandbox_environment,
    sandbox_fragment,
    strip_hosts_block,
)
from grpo_infra.slurmgen.conf import gres_conf
from grpo_infra.spec import Environment, load_stack
from tests.slurm.variants import STACK_DISAGGREGATED, disaggregated_variant

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local() -> Environment:
    return load_stack("local-slurm", ROOT).environment


def test_default_size_is_the_stack_itself(local: Environment) -> None:
    assert sandbox_environment(local, 3) is local


@pytest.mark.parametrize(
    ("count", "names"),
    [(1, ["node1"]), (2, ["node1", "node2"]), (5, ["node1", "node2", "node3", "node4", "node5"])],
)
def test_other_sizes_continue_the_stacks_numbering(local: Environment, count: int, names: list[str]) -> None:
    assert node_names(local, count) == names
    env = sandbox_environment(local, count)
    assert env.pool(env.job.pool).host_names == names
    assert env.gang.nodes == count
    assert sum(t.gpu_quota for t in env.tenants) <= env.pool(env.job.pool).gpu_count


def test_node_count_is_bounded(local: Environment) -> None:
    with pytest.raises(SandboxError, match="--nodes"):
        node_names(local, 0)


def test_addresses_are_inside_the_sandbox_subnet_and_distinct(local: Environment) -> None:
    plan = make_plan("local-slurm", local, 3, root=Path("/tmp/sbx"), subnet="10.99.7.0/24")
    addresses = [plan.controller.address, *(n.address for n in plan.nodes)]
    assert len(set(addresses)) == 4
    assert all(a.startswith("10.99.7.") for a in addresses)
    assert plan.bridge_address == "10.99.7.1"


def test_public_subnets_are_refused(local: Environment) -> None:
    with pytest.raises(SandboxError, match="private"):
        make_plan("local-slurm", local, 3, subnet="8.8.8.0/24")


def test_base_conf_includes_the_rendered_fragment_and_names_the_cluster(local: Environment) -> None:
    plan = make_plan("local-slurm", local, 3, root=Path("/tmp/sbx"))
    text = base_slurm_conf(plan, Path("/tmp/sbx/etc/stack-slurm.conf"))
    assert "Include /tmp/sbx/etc/stack-slurm.conf" in text
    assert "ClusterName=sandbox" in text
    assert f"SlurmctldHost=sbx-ctl({plan.controller.address})" in text
    assert "SlurmdPidFile=/tmp/sbx/nodes/%n/slurmd.pid" in text
    assert "NodeName" not in text  # nodes and partition come from the stack, not the sandbox


def test_hosts_block_round_trips(local: Environment) -> None:
    plan = make_plan("local-slurm", local, 3)
    original = "127.0.0.1 localhost\n::1 ip6-localhost\n"
    added = original + hosts_block(plan)
    assert HOSTS_BEGIN in added
    assert "node3" in added
    assert strip_hosts_block(added) == original
    assert strip_hosts_block(original) == original


def test_devices_are_the_stacks_gres_files(local: Environment) -> None:
    assert [str(p) for p in device_paths(local)] == [f"/run/grpo-sandbox/dev/nvidia{i}" for i in range(8)]


def test_fragment_keeps_the_partition_but_not_account_filters() -> None:
    fragment = (
        "GresTypes=gpu\n"
        "NodeName=node[1-3] CPUs=4 Gres=gpu:sim:8\n"
        "PartitionName=grpo Nodes=node[1-3] OverSubscribe=EXCLUSIVE AllowAccounts=a,b AllowQos=normal State=UP\n"
    )
    text, dropped = sandbox_fragment(fragment)
    assert dropped == ["AllowAccounts=a,b", "AllowQos=normal"]
    assert "PartitionName=grpo Nodes=node[1-3] OverSubscribe=EXCLUSIVE State=UP" in text
    assert "NodeName=node[1-3] CPUs=4 Gres=gpu:sim:8" in text


def test_a_sandbox_smaller_than_the_gang_runs_a_job_rendered_for_it_and_says_so(local: Environment) -> None:
    small = make_plan("local-slurm", local, 2)
    assert small.env.gang.nodes == 2  # the rendered job asks for the 2 nodes there are, so it can start
    note = resize_note(local, small)
    assert note is not None
    assert note.startswith("the stack's gang is 3 nodes × 8 GPUs (job grpo-sandbox); this sandbox has 2 nodes")
    assert "rendered for 2 × 8" in note and "PartitionConfig" in note
    assert resize_note(local, make_plan("local-slurm", local, 3)) is None


def test_a_stack_that_cannot_be_cut_to_the_size_is_refused_in_one_line() -> None:
    onprem = load_stack("onprem-slurm", ROOT).environment
    # Its fabric tree names hosts a 2-node sandbox does not have.
    with pytest.raises(SandboxError, match=r"cannot run on a sandbox of 2 nodes \(gpu\[001-002\]\): .*gpu003"):
        make_plan("onprem-slurm", onprem, 2)


def test_a_disaggregated_stack_runs_on_its_roles_own_hosts_each_pool_with_its_own_devices() -> None:
    """Both pools as declared (8-GPU trainer node, 4-GPU rollout nodes): the sandbox neither drops the rollout's
    pool nor reshapes it, and each pool's gres.conf line names its own GPUs' device files."""
    env = disaggregated_variant()
    plan = make_plan(STACK_DISAGGREGATED, env, 3)
    assert plan.env is env
    assert [n.name for n in plan.nodes] == ["node1", "node2", "node3"]
    gres = [line for line in gres_conf(env).splitlines() if line.startswith("NodeName=")]
    assert gres == [
        "NodeName=node1 Name=gpu Type=sim File=/run/grpo-sandbox/dev/nvidia[0-7]",
        "NodeName=node[2-3] Name=gpu Type=simr File=/run/grpo-sandbox/dev/nvidia[0-3]",
    ]
    with pytest.raises(SandboxError, match=r"runs on its roles' own hosts: --nodes 3 \(node\[1-3\]\), not 2$"):
        make_plan(STACK_DISAGGREGATED, env, 2)
