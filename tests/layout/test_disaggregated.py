"""A disaggregated job (job.layout): the spec names each role's pool once, verl's settings and the Kubernetes
objects are derived from it, and `check` refuses a layout Kueue could never admit or verl would misplace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from grpo_infra import probe, synth, training, verl
from grpo_infra.check import violations
from grpo_infra.image.verl_releases import (
    FULLY_ASYNC_CONFIG_IN_WHEEL,
    flatten_keys,
    fully_async_config_keys,
    layout_keys,
)
from grpo_infra.k8s import objects
from grpo_infra.k8s.kinds import with_gang_views
from grpo_infra.nodepools.resources import all_pool_resources
from grpo_infra.rehearsal.plan import rehearsal
from grpo_infra.spec import Environment, SpecError, environment_from_config, load_stack
from grpo_infra.spec.layout import POOL_RESOURCE_PREFIX
from grpo_infra.validate.rules import admission_errors
from tests.conftest import ROOT
from tests.slurm.variants import disaggregated_variant
from tests.verl.test_overrides import _fully_async, _verl_config_dir

STACK = "gke-disagg"


def _config() -> dict[str, Any]:
    text = (ROOT / "stacks" / f"Pulumi.{STACK}.yaml").read_text()
    return yaml.safe_load(text)["config"]


def _env(edit: Any = None) -> Environment:
    """The shipped disaggregated stack, with `edit(environment_dict)` applied."""
    config = _config()
    if edit is not None:
        edit(config["grpo-infra:environment"])
    return environment_from_config(config, {"grpo-infra:wandbApiKey"}, STACK)


def _ray_job(env: Environment) -> dict[str, Any]:
    return next(o for o in objects(env) if o["kind"] == "RayJob")


def _rules(env: Environment) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in violations(env):
        out.setdefault(v.rule, []).append(f"{v.where}: {v.message}")
    return out


def test_the_shipped_stack_is_feasible() -> None:
    assert violations(load_stack(STACK, ROOT).environment) == []


def test_verl_gets_the_fully_async_entrypoint_and_each_roles_shape_from_the_pools() -> None:
    env = _env()
    argv = verl.command(env)
    assert argv[:3] == ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
    pairs = dict(verl.overrides(env))
    assert (pairs["trainer.nnodes"], pairs["trainer.n_gpus_per_node"]) == (2, 8)  # a3-h100
    assert (pairs["rollout.nnodes"], pairs["rollout.n_gpus_per_node"]) == (2, 4)  # g2-l4
    # fully_async_rollouter.py:351 refuses any other train batch; the trainer takes train/mini mini batches.
    assert pairs["data.train_batch_size"] == 0
    assert pairs["async_training.require_batches"] == env.job.batch.train // env.job.batch.mini
    # The yaml's default 100 would cap the run (fully_async_rollouter.py:405-407).
    assert pairs["rollout.total_rollout_steps"] is None


def test_a_colocated_stack_keeps_the_hybrid_engine() -> None:
    env = load_stack("gke-dev", ROOT).environment
    assert verl.command(env)[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert not any(k.startswith(("rollout.", "async_training.")) for k, _ in verl.overrides(env))


def test_every_derived_key_is_in_the_installed_fully_async() -> None:
    """The keys the layout derives exist in verl 0.9.1's own fully_async_ppo_trainer config (its defaults,
    ppo_trainer, merged under it as Hydra would)."""
    merged = _fully_async()

    def with_reward_model(e: dict[str, Any]) -> None:  # so the reward model's derived keys are judged too
        e["pools"][1]["nodes"] = 3
        e["job"]["layout"]["rewardModel"] = {"pool": "g2-l4", "nodes": 1}

    env = _env(with_reward_model)
    keys = set(flatten_keys(OmegaConf.to_yaml(merged)))
    missing = [k for k, _ in verl.overrides(env) if not k.startswith("+") and k not in keys]
    assert not missing, f"not in verl's fully async config: {missing}"


def test_the_derived_config_passes_the_fully_async_trainers_own_asserts() -> None:
    """The installed config with the stack's overrides applied, judged by what verl 0.9.1 asserts before it
    trains: fully_async_trainer.py:75-76 and fully_async_rollouter.py:348-363, 733, 842."""
    config = _fully_async()
    for key, value in verl.overrides(_env()):
        OmegaConf.update(config, key.removeprefix("+"), value, force_add=key.startswith("+"))
    assert config.actor_rollout_ref.hybrid_engine is False
    assert config.data.train_batch_size == 0 and config.data.gen_batch_size == 1
    assert config.async_training.staleness_threshold >= 0 and config.async_training.trigger_parameter_sync_step >= 1
    assert config.actor_rollout_ref.rollout.calculate_log_probs is True
    assert config.actor_rollout_ref.rollout.mode == "async"
    assert config.trainer.resume_mode in ("auto", "disable")  # fully_async_rollouter.py:674-706
    assert not config.reward.reward_model.enable  # no reward model role: none configured


def test_the_stored_fully_async_keys_are_the_installed_wheels() -> None:
    text = (Path(_verl_config_dir()).parents[1] / FULLY_ASYNC_CONFIG_IN_WHEEL.removeprefix("verl/")).read_text()
    assert set(layout_keys(text)) <= fully_async_config_keys("0.9.1")
    assert {"rollout.nnodes", "rollout.n_gpus_per_node", "async_training.require_batches"} <= fully_async_config_keys(
        "0.9.1"
    )


def test_a_key_only_the_fully_async_config_has_is_refused_on_a_colocated_job() -> None:
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.gke-dev.yaml").read_text())["config"]
    config["grpo-infra:environment"]["job"]["overrides"]["async_training.staleness_threshold"] = 0.5
    env = environment_from_config(config, {"grpo-infra:wandbApiKey"}, "gke-dev")
    assert "verl-override-key" in _rules(env)
    ok = _env(lambda e: e["job"]["overrides"].update({"async_training.staleness_threshold": 0.5}))
    assert "verl-override-key" not in _rules(ok)


@pytest.mark.parametrize(
    "key", ["rollout.nnodes", "rollout.n_gpus_per_node", "trainer.nnodes", "reward.reward_model.nnodes"]
)
def test_an_override_of_a_derived_role_shape_is_refused_naming_the_field(key: str) -> None:
    with pytest.raises(SpecError) as refused:
        _env(lambda e: e["job"]["overrides"].update({key: 3}))
    message = str(refused.value)
    assert key in message and "set by the spec" in message and "\n" not in message.strip()


def test_the_pool_is_named_once() -> None:
    with pytest.raises(SpecError, match=r"job\.pool: a disaggregated job names each role's pool"):
        _env(lambda e: e["job"].update(pool="a3-h100"))
    with pytest.raises(SpecError, match=r"job\.layout\.rollout\.pool 'nope' is not a pool"):
        _env(lambda e: e["job"]["layout"]["rollout"].update(pool="nope"))
    with pytest.raises(SpecError, match=r"job\.layout\.rollout\.nodes 3: pool g2-l4 has 2 nodes"):
        _env(lambda e: e["job"]["layout"]["rollout"].update(nodes=3))


def test_one_worker_group_per_role_each_on_its_pool_advertising_the_pools_ray_resource() -> None:
    groups = _ray_job(_env())["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    shape = {
        g["groupName"]: (
            g["replicas"],
            g["template"]["spec"]["nodeSelector"],
            g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            g["rayStartParams"]["resources"],
        )
        for g in groups
    }
    assert shape == {
        "trainer": (2, {"grpo-infra/pool": "a3-h100"}, "8", """'{"grpo_pool:a3-h100": 8}'"""),
        "rollout": (2, {"grpo-infra/pool": "g2-l4"}, "4", """'{"grpo_pool:g2-l4": 4}'"""),
    }


def test_kuberay_reads_the_pool_resource_and_so_still_sets_the_gpu_count() -> None:
    """KubeRay v1.6.2 sets a worker's `num-gpus` from its `nvidia.com/gpu` limit only when it can read
    `rayStartParams.resources` as it reads them (pod.go:1085-1098: trim quotes, then JSON); otherwise it logs an
    error and the worker's Ray counts GPUs itself (none on a node without NVML). The rehearsal of gke-disagg
    shows the real operator doing either."""
    for group in _ray_job(_env())["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        value = group["rayStartParams"]["resources"]
        assert json.loads(value.strip("'\"` ")) == {
            f"grpo_pool:{group['template']['spec']['nodeSelector']['grpo-infra/pool']}": int(
                group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            )
        }


def test_each_worker_group_tolerates_and_is_sized_for_its_own_pool() -> None:
    """A taint only the rollout's pool has is tolerated by the rollout's pods alone, and each role's pods ask
    for what a node of its own pool can give (a trainer pod sized for an a3 node fits no g2 node)."""

    def spot_rollout(e: dict[str, Any]) -> None:
        e["pools"][1]["taints"].append({"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"})

    env = _env(spot_rollout)
    groups = {
        g["groupName"]: g["template"]["spec"] for g in _ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    }
    tolerated = {name: {t["key"] for t in spec["tolerations"]} for name, spec in groups.items()}
    assert "cloud.google.com/gke-spot" in tolerated["rollout"]
    assert "cloud.google.com/gke-spot" not in tolerated["trainer"]

    def cpus(name: str) -> float:
        return int(groups[name]["containers"][0]["resources"]["requests"]["cpu"].removesuffix("m")) / 1000

    rollout_node, trainer_node = env.pool("g2-l4").cpus, env.pool("a3-h100").cpus
    assert rollout_node < cpus("trainer") <= trainer_node
    assert cpus("rollout") <= rollout_node


def test_the_gang_budget_counts_every_roles_pods() -> None:
    pdb = next(o for o in objects(_env()) if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 + 2 + 2 + 1  # head, trainer, rollout, submitter


def test_kueue_gives_each_role_its_pools_flavor_and_quota() -> None:
    queue = next(o for o in objects(_env()) if o["kind"] == "ClusterQueue")
    gpus = {
        f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == "nvidia.com/gpu")
        for f in queue["spec"]["resourceGroups"][0]["flavors"]
    }
    assert gpus == {"a3-h100": "16", "g2-l4": "8", "ray-head": "0"}
    assert admission_errors(with_gang_views(objects(_env()))) == []


def test_a_role_the_quota_does_not_cover_is_refused_naming_role_pool_and_shortfall() -> None:
    env = _env(lambda e: e["tenants"][0].update(gpuQuota=20))
    found = [v for v in violations(env) if v.rule == "layout-role-quota"]
    assert len(found) == 1
    (v,) = found
    assert "role rollout" in v.message and "pool g2-l4" in v.message and v.by == "4 GPUs of pool g2-l4"
    assert v.where.endswith("tenants[0].gpuQuota")
    # The line Pulumi and `check`'s warnings print (components/program.py): one line, all three named.
    line = v.line()
    assert "\n" not in line and "role rollout" in line and "pool g2-l4" in line and "(by 4 GPUs of pool g2-l4)" in line


def test_a_rollout_pool_as_wide_as_the_trainers_is_refused_verl_cannot_pin_the_trainer() -> None:
    def eight_gpu_rollout(e: dict[str, Any]) -> None:
        e["pools"][1]["gpu"]["perNode"] = 8
        e["tenants"][0]["gpuQuota"] = 32

    found = _rules(_env(eight_gpu_rollout))
    assert [r for r in found if r.startswith("layout-")] == ["layout-placement"]
    assert "job.layout.rollout.pool" in found["layout-placement"][0]


def test_the_same_pool_for_two_roles_is_placeable() -> None:
    def shared(e: dict[str, Any]) -> None:
        e["pools"][0]["nodes"] = 3
        e["job"]["layout"] = {
            "kind": "disaggregated",
            "trainer": {"pool": "a3-h100", "nodes": 2},
            "rollout": {"pool": "a3-h100", "nodes": 1},
        }

    assert "layout-placement" not in _rules(_env(shared))


def test_a_reward_model_off_the_rollouts_pool_is_refused() -> None:
    def reward(e: dict[str, Any]) -> None:
        e["pools"][1]["nodes"] = 3
        e["tenants"][0]["gpuQuota"] = 28
        e["job"]["layout"]["rewardModel"] = {"pool": "g2-l4", "nodes": 1}

    env = _env(reward)
    assert "layout-placement" not in _rules(env)
    pairs = dict(verl.overrides(env))
    assert (pairs["reward.reward_model.nnodes"], pairs["reward.reward_model.n_gpus_per_node"]) == (1, 4)
    assert pairs["reward.reward_model.enable_resource_pool"] is True
    groups = [g["groupName"] for g in _ray_job(env)["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    assert groups == ["trainer", "rollout", "reward-model"]

    def elsewhere(e: dict[str, Any]) -> None:
        e["pools"][0]["nodes"] = 3
        e["tenants"][0]["gpuQuota"] = 32
        e["job"]["layout"]["rewardModel"] = {"pool": "a3-h100", "nodes": 1}

    assert any("rewardModel.pool" in m for m in _rules(_env(elsewhere))["layout-placement"])


def test_the_rollout_tp_must_divide_the_rollout_pools_node() -> None:
    found = _rules(_env(lambda e: e["job"]["rollout"].update(tensorParallel=8)))
    assert "verl-rollout-tp" in found and "pool g2-l4" in found["verl-rollout-tp"][0]


def test_the_launchers_refuse_a_disaggregated_job() -> None:
    def with_launcher(e: dict[str, Any]) -> None:
        e["launchers"] = {"skypilot": {"infra": "k8s", "accelerator": "H100"}}

    assert any("launchers" in m for m in _rules(_env(with_launcher))["layout-target"])


def test_pulumi_creates_both_pools_nodes() -> None:
    from datetime import UTC, datetime

    made = {r.name: r.node_pool["node_count"] for r in all_pool_resources(_env(), datetime(2026, 1, 1, tzinfo=UTC))}
    assert made == {"a3-h100": 2, "g2-l4": 2, "ray-head": 1}


def _set(path: str, value: Any) -> Any:
    def edit(e: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = e
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("job.layout.trainer.nodes", 0, "job.layout.trainer.nodes: input should be greater than or equal to 1"),
        ("job.layout.rollout.gpus", 3, "job.layout.rollout.gpus: unknown key; expected one of: nodes, pool"),
        (
            "job.layout.trainr",
            {"pool": "a3-h100", "nodes": 2},
            "job.layout.trainr: unknown key; did you mean `trainer`?",
        ),
        ("job.layout.kind", "split", "job.layout.kind: 'split' is not one of 'colocated', 'disaggregated'"),
    ],
)
def test_a_bad_layout_field_is_named_as_the_stack_file_spells_it(path: str, value: Any, expected: str) -> None:
    """pydantic puts the union's tag in the path (`job.layout.disaggregated.trainer`); the message must not."""
    with pytest.raises(SpecError) as refused:
        _env(_set(path, value))
    message = str(refused.value)
    assert f"grpo-infra:environment.{expected}" in message and "\n" not in message.strip(), message


def _with_probe(e: dict[str, Any]) -> None:
    e["job"]["probe"] = {"steps": 2}


def test_the_probe_stands_in_for_verl_with_every_roles_nodes_gpus_and_pool() -> None:
    """The probe of a disaggregated job (a rehearsal's, item 4's) is told each role's shape and pool, in
    verl's order, instead of the trainer's gang alone (which would count 2 nodes where Ray has 4)."""
    env = _env(_with_probe)
    argv = training.probe_command(env)
    assert argv[:3] == ["python3", "-m", "grpo_infra.probe"]
    args = probe.parse(argv[3:])
    assert args.roles == [probe.Role("trainer", 2, 8, "a3-h100"), probe.Role("rollout", 2, 4, "g2-l4")]
    assert "--nodes" not in argv and "--gpus-per-node" not in argv


def test_the_probe_reads_the_pool_resource_the_workers_advertise() -> None:
    assert probe.POOL_RESOURCE_PREFIX == POOL_RESOURCE_PREFIX
    resources = json.loads(
        _ray_job(_env())["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["rayStartParams"]["resources"].strip("'")
    )
    assert probe.node_pool({"CPU": 4.0, "GPU": 4.0, **resources}) == "g2-l4"
    assert probe.node_pool({"CPU": 4.0}) is None


def test_the_probe_names_a_rank_off_its_roles_pool() -> None:
    roles = [probe.Role("trainer", 1, 2, "a3-h100"), probe.Role("rollout", 1, 1, "g2-l4")]
    ranks = [
        {"rank": 0, "role": "trainer", "node": "h1", "pool": "a3-h100"},
        {"rank": 1, "role": "trainer", "node": "h1", "pool": "a3-h100"},
        {"rank": 2, "role": "rollout", "node": "h1", "pool": "a3-h100"},
    ]
    assert probe.misplaced(ranks, roles) == ["rank 2 of role rollout ran on node h1 of pool a3-h100, not g2-l4"]
    assert probe.misplaced(ranks[:2], roles) == []


@pytest.mark.parametrize("bad", ["trainer", "trainer=2x8", "trainer=2@a3", "trainer=0x8@a3", "=2x8@a3", "t=2x8@"])
def test_a_malformed_probe_role_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit):
        probe.parse(["--checkpoint-dir", "/tmp/x", "--role", bad])


def test_a_slurm_stack_renders_every_role_as_a_component_of_one_heterogeneous_job() -> None:
    """Slurm holds the roles' nodes as one heterogeneous job (docs/slurm.md, "Disaggregated GRPO"): a component
    per role, trainer first (the batch host is then a trainer node, the Ray head), each with its pool's nodes,
    GRES and feature; the job-wide options once, on the first."""
    env = disaggregated_variant()
    assert [v for v in violations(env) if v.rule.startswith("layout-")] == []
    script = synth.render(env)["slurm/grpo.sbatch"]
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]
    split = directives.index("hetjob")
    trainer, rollout = directives[:split], directives[split + 1 :]
    assert directives.count("hetjob") == 1
    assert {"--nodes=1", "--gres=gpu:sim:8", "--constraint=sim", "--requeue", "--output=%x-%j.out"} <= set(trainer)
    assert {"--nodes=2", "--gres=gpu:simr:4", "--constraint=sim-rollout", "--partition=grpo"} <= set(rollout)
    assert not [d for d in rollout if d.startswith(("--output", "--time", "--signal", "--job-name"))]
    # Each node's Ray advertises its role's pool.
    assert "role_resources=(grpo_pool:sim grpo_pool:sim-rollout)" in script


def test_on_slurm_the_roles_together_must_fit_the_tenants_one_quota() -> None:
    """A QOS's GrpTRES counts every component of a heterogeneous job (heterogeneous_jobs.html): 8 + 8 GPUs
    under a quota of 12 pend forever; `check` names the role that crosses it, its pool and the shortfall."""
    env = disaggregated_variant()
    data = env.model_dump(by_alias=True, exclude_none=True)
    data["tenants"][0]["gpuQuota"] = 12
    found = [v for v in violations(Environment.model_validate(data)) if v.rule == "layout-role-quota"]
    assert [(v.where, v.by) for v in found] == [
        ("grpo-infra:environment.tenants[0].gpuQuota", "4 GPUs of pool sim-rollout")
    ]
    assert found[0].message.startswith("role rollout needs 8 GPUs of pool sim-rollout, which brings the job to 16 GPUs")


def test_a_rehearsal_shrinks_every_role_with_its_pool_and_the_quota_with_the_job() -> None:
    """Pools of 4 nodes shrink to 2 in a rehearsal: each role with them, and the tenant keeps a quota that
    admits every role (else Kueue would admit none, and the rehearsal would prove nothing)."""

    def bigger(e: dict[str, Any]) -> None:
        e["pools"][0]["nodes"] = e["pools"][1]["nodes"] = 4
        e["job"]["layout"]["trainer"]["nodes"] = e["job"]["layout"]["rollout"]["nodes"] = 4
        e["tenants"][0]["gpuQuota"] = 48

    planned = rehearsal(STACK, _env(bigger)).env
    assert [(r.role, r.nodes) for r in planned.role_gangs()] == [("trainer", 2), ("rollout", 2)]
    assert planned.tenants[0].gpu_quota == 24
    assert not [v for v in violations(planned) if v.rule in ("layout-role-quota", "tenant-quota")]
    assert "--role=rollout=2x4@g2-l4" in training.probe_command(planned)
