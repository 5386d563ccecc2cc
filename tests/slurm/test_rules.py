"""`check`'s Slurm rules: node layouts, tenants' QOS, the time-limit checkpoint, and where the job's files live."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from grpo_infra.check import violations, warnings
from grpo_infra.cli import app
from grpo_infra.spec import Environment
from tests.conftest import ROOT
from tests.slurm.variants import stack, variant


def _rules(env: Environment) -> list[tuple[str, str, str]]:
    return [(v.rule, v.where, v.by) for v in violations(env)]


def _layout(**fields: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        d["slurm"]["nodeLayouts"][0].update(fields)

    return edit


def test_shipped_slurm_stacks_have_no_violation_and_only_the_sandboxs_warning() -> None:
    assert violations(stack("onprem-slurm")) == [] and warnings(stack("onprem-slurm")) == []
    local = stack("local-slurm")
    assert violations(local) == []
    assert [(w.rule, w.where) for w in warnings(local)] == [
        ("slurm-quota-unenforced", "grpo-infra:environment.slurm.accounting")
    ]


def test_layout_that_slurmd_would_not_find_is_refused() -> None:
    # 2 sockets x 56 cores x 1 thread = 112, the pool says 224 CPUs: slurmd -C would report 224.
    env = variant("onprem-slurm", _layout(threadsPerCore=1))
    assert ("slurm-node-layout", "grpo-infra:environment.slurm.nodeLayouts[0]", "112 CPUs") in _rules(env)


def test_mem_spec_limit_must_leave_memory_for_jobs() -> None:
    env = variant("local-slurm", _layout(memSpecLimitMib=6144))  # the pool has 6 GiB = 6144 MiB
    assert [r for r in _rules(env) if r[0] == "slurm-node-layout"] == [
        ("slurm-node-layout", "grpo-infra:environment.slurm.nodeLayouts[0].memSpecLimitMib", "")
    ]


def test_a_layout_names_a_known_pool_and_a_pool_without_one_is_warned_about() -> None:
    env = variant("local-slurm", _layout(pool="other"))
    assert [(v.rule, v.where) for v in violations(env)] == [
        ("slurm-node-layout", "grpo-infra:environment.slurm.nodeLayouts[0].pool")
    ]
    [missing] = [w for w in warnings(env) if w.rule == "slurm-node-layout-missing"]
    assert "pool sim (pools[0]) has no layout" in missing.message


def test_tenants_sharing_a_qos_are_refused() -> None:
    env = variant("onprem-slurm", lambda d: d["tenants"][1].update(queue="grpo-high"))
    [found] = [v for v in violations(env) if v.rule == "slurm-qos-shared"]
    assert "alignment (96 GPUs), research (32 GPUs) share QOS grpo-high" in found.message


def test_time_limit_must_hold_the_signal_lead_and_one_save() -> None:
    # 8 minutes = 480 s; the signal comes 120 s early and onprem-slurm's save takes up to 600 s: short by 240 s.
    env = variant("onprem-slurm", lambda d: d["slurm"].update(timeLimit="00:08:00"))
    assert ("slurm-checkpoint-window", "grpo-infra:environment.slurm.timeLimit", "240 s") in _rules(env)


def test_a_requeued_run_must_resume() -> None:
    env = variant("onprem-slurm", lambda d: d["job"]["checkpoint"].update(resume="disable"))
    assert ("slurm-requeue-resume", "grpo-infra:environment.job.checkpoint.resume", "") in _rules(env)


def test_paths_outside_the_shared_file_system_are_warned_about() -> None:
    env = variant("onprem-slurm", lambda d: d["slurm"].update(sharedPaths=["/gpfs", "/lustre/checkpoints"]))
    found = warnings(env)
    assert [w.where.removeprefix("grpo-infra:environment.job.") for w in found] == [
        "modelPath",
        "data.trainFiles[0]",
        "data.valFiles[0]",
    ]
    # The container path is judged by where its mount comes from on the host.
    assert "/models/Qwen2.5-32B-Instruct (on the nodes: /lustre/models/Qwen2.5-32B-Instruct)" in found[0].message
    assert violations(env) == []  # model and data: a warning, never a refusal


def test_checkpoints_off_shared_storage_are_refused_for_a_multi_node_gang() -> None:
    env = variant("onprem-slurm", lambda d: d["slurm"].update(sharedPaths=["/gpfs"]))
    assert [(v.rule, v.where) for v in violations(env)] == [
        ("checkpoint-shared", "grpo-infra:environment.job.checkpoint.dir")
    ]


def test_a_path_on_no_mount_is_inside_the_image() -> None:
    env = variant("onprem-slurm", lambda d: d["job"]["checkpoint"].update(dir="/workspace/ckpt"))
    [found] = violations(env)
    assert (found.rule, found.where) == ("checkpoint-shared", "grpo-infra:environment.job.checkpoint.dir")


def test_without_a_container_paths_are_judged_as_they_are() -> None:
    env = variant("local-slurm", lambda d: d["slurm"].update(sharedPaths=["/run/grpo-sandbox/shared"]))
    found = [w for w in warnings(env) if w.rule == "slurm-path-shared"]
    assert [w.where.rsplit(".", 1)[-1] for w in found] == ["modelPath", "trainFiles[0]", "valFiles[0]"]


def test_quota_on_the_default_qos_is_warned_about() -> None:
    env = variant(
        "local-slurm", lambda d: (d["tenants"][0].update(queue="normal"), d["slurm"].update(accounting="slurmdbd"))
    )
    [found] = warnings(env)
    assert found.rule == "slurm-qos-default" and "GrpTRES=gres/gpu=24" in found.message


def test_check_prints_warnings_and_still_passes(tmp_path: Any) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    text = (
        (ROOT / "stacks" / "Pulumi.onprem-slurm.yaml")
        .read_text()
        .replace("sharedPaths: [/lustre]", "sharedPaths: [/gpfs, /lustre/checkpoints]")
    )
    (stacks / "Pulumi.onprem-slurm.yaml").write_text(text)
    (stacks / "locks").mkdir()
    (stacks / "locks" / "onprem-slurm.txt").write_text((ROOT / "stacks" / "locks" / "onprem-slurm.txt").read_text())
    result = CliRunner().invoke(app, ["check", "onprem-slurm", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("warning: ") == 3 and "[slurm-path-shared]" in result.output
