"""The local stack's stand-ins: its pods run the CPU variant of the image (`image.variant: cpu`) and its
driver runs the probe in verl's place (`job.probe`), under the same guards as verl; `check` keeps both
off pools of real GPUs and off Slurm. The real-node job (tests/kube/test_job_real.py) runs these
rendered objects unchanged."""

from __future__ import annotations

import shlex
from typing import Any

from grpo_infra.check import violations, warnings
from grpo_infra.image import guard_args
from grpo_infra.image.pods import CONTAINER_NAME
from grpo_infra.image.variant import variant_guard_args
from grpo_infra.k8s import ray_job
from grpo_infra.k8s.shipped import RESUME_FILE, RESUME_MOUNT
from grpo_infra.probe import parse

from .conftest import env_of, variant


def _guard_args(job: dict[str, Any]) -> list[list[str]]:
    cluster = job["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    inits = [c for g in groups for c in g["template"]["spec"]["initContainers"] if c["name"] == CONTAINER_NAME]
    return [c["command"][2:] for c in inits]


def _rules(env: Any) -> list[str]:
    return [v.rule for v in violations(env)]


def test_the_local_stacks_pods_guard_the_cpu_variant_and_a_production_stack_its_declaration() -> None:
    local = env_of("local-k8s")
    assert local.image.variant == "cpu"
    # The head (first) on a CPU node checks the image alone; the GPU workers their node too.
    assert _guard_args(ray_job(local)) == [variant_guard_args(local, gpu_node=False), variant_guard_args(local)]
    assert "--cuda" not in variant_guard_args(local) and "--grpo-infra" in variant_guard_args(local)
    declared = variant("local-k8s", lambda raw: raw["image"].pop("variant"))
    assert _guard_args(ray_job(declared)) == [guard_args(declared, gpu_node=False), guard_args(declared)]
    assert "--cuda" in guard_args(declared)


def test_the_probe_runs_in_verls_place_under_the_resume_rule_with_the_gangs_shape() -> None:
    env = env_of("local-k8s")
    assert env.job.probe is not None
    script = shlex.split(ray_job(env)["spec"]["entrypoint"])[2]
    training = script.rsplit(" && ", 1)[1]
    argv = shlex.split(training)
    # The resume rule wraps the probe as it wraps verl: a resumed run that saves no newer step fails.
    assert argv[:4] == ["python3", f"{RESUME_MOUNT}/{RESUME_FILE}", "--checkpoint-dir", env.job.checkpoint.dir]
    probe = argv[argv.index("--") + 1 :]
    assert probe[:3] == ["python3", "-m", "grpo_infra.probe"]
    args = parse(probe[3:])  # the probe's own parser
    assert (args.nodes, args.gpus_per_node) == (env.gang.nodes, env.gang.gpus_per_node)
    assert str(args.checkpoint_dir) == env.job.checkpoint.dir and args.steps == env.job.probe.steps
    assert args.head_apart and args.address == "auto"
    assert "verl.trainer.main_ppo" not in script


def test_the_cpu_variant_is_refused_on_real_gpus_and_on_slurm() -> None:
    on_h100 = variant("onprem-k8s", lambda raw: raw["image"].update(variant="cpu"))
    assert "image-variant-gpus" in _rules(on_h100)
    on_slurm = variant("local-slurm", lambda raw: raw["image"].update(variant="cpu"))
    assert "image-variant-target" in _rules(on_slurm)
    assert "image-variant-gpus" not in _rules(env_of("local-k8s"))


def test_the_probe_needs_grpo_infra_in_the_image_and_a_kubernetes_stack() -> None:
    def probe(raw: dict[str, Any]) -> None:
        raw["job"]["probe"] = {"steps": 2}

    without = variant("local-k8s", probe, lambda raw: raw["image"].pop("variant"))
    assert without.image.contents.grpo_infra is False
    assert "probe-grpo-infra" in _rules(without)
    assert "probe-target" in _rules(variant("local-slurm", probe))
    real = variant("onprem-k8s", probe, lambda raw: raw["image"]["contents"].update(grpoInfra=True))
    assert "probe-grpo-infra" not in _rules(real)
    # The SGLang images also warn of sglang's own transformers pin (tests/check/test_engine_pins.py).
    engine = "image-engine-transformers"
    assert [w.rule for w in warnings(real) if w.rule != engine] == ["probe-real-gpus"], "allowed on real GPUs"
    assert [w.rule for w in warnings(env_of("local-k8s"))] == [engine]
