"""The image in the rendered jobs: the RayJob's image, rayVersion and guard init containers; the sbatch's
container image and guard step. The rendered guard commands are run for real here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.image.dockerfile import GUARD_FILE
from grpo_infra.image.pods import GUARD_MOUNT, VOLUME
from grpo_infra.k8s import objects
from grpo_infra.k8s.rayjob import ray_job
from grpo_infra.k8s.shipped import guard_config_map_name
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment

from .conftest import SHIPPED_STACKS, stack, variant

K8S = [s for s in SHIPPED_STACKS if stack(s).target == "kubernetes"]
VENV_BIN = str(Path(sys.executable).parent)


def pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]["spec"], *(g["template"]["spec"] for g in cluster["workerGroupSpecs"])]


@pytest.mark.parametrize("name", K8S)
def test_rayjob_runs_the_declared_image_and_its_ray(name: str) -> None:
    env = stack(name)
    job = ray_job(env)
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == "2.60.0"
    images = {c["image"] for p in pods(job) for c in p["containers"] + p["initContainers"]}
    images |= {c["image"] for c in job["spec"]["submitterPodTemplate"]["spec"]["containers"]}
    assert images == {env.image.ref}


def test_ray_version_follows_the_images_ray() -> None:
    env = variant("gke-dev", lambda d: d["image"]["contents"].update(ray="2.61.0"))
    assert ray_job(env)["spec"]["rayClusterSpec"]["rayVersion"] == "2.61.0"


def test_a_digest_pins_every_container() -> None:
    digest = "sha256:" + "0f" * 32
    env = variant("gke-dev", lambda d: d["image"].update(digest=digest))
    job = ray_job(env)
    images = {c["image"] for p in pods(job) for c in p["containers"] + p["initContainers"]}
    assert images == {f"us-docker.pkg.dev/ml-dev-project/grpo/verl:0.9.1-vllm0.24.0-ray2.60.0@{digest}"}


@pytest.mark.parametrize("name", K8S)
def test_head_and_every_worker_pod_run_the_guard_first(name: str) -> None:
    env = stack(name)
    # The production images' CPython; the CPU variant's (Debian 12's) where the nodes run it (local-k8s).
    python = "3.11" if env.image.variant == "cpu" else "3.12"
    for pod in pods(ray_job(env)):
        init = pod["initContainers"][0]  # first: nothing of the pod runs before the image is known right
        assert init["name"] == "image-guard" and init["command"][:2] == ["python3", f"{GUARD_MOUNT}/{GUARD_FILE}"]
        assert init["command"][2:4] == ["--python", python]
        # The program from the job's ConfigMap, read-only: the pod template names it and holds none of it.
        assert init["volumeMounts"] == [{"name": VOLUME, "mountPath": GUARD_MOUNT, "readOnly": True}]
        (volume,) = [v for v in pod["volumes"] if v["name"] == VOLUME]
        assert volume["configMap"]["name"] == guard_config_map_name(env)


@pytest.mark.parametrize("name", K8S)
def test_a_guard_that_checks_hcas_holds_the_fabric_resource_the_worker_holds_and_no_other_guard_holds_any(
    name: str,
) -> None:
    """libibverbs lists no HCA whose /dev/infiniband/uverbsN the container was not given, and the RDMA device
    plugin gives them only to a container requesting the pool's resource: a guard checking `--hca` without it
    fails on every real node (`grpo-infra rehearse onprem-k8s` showed it, docs/rehearsal.md)."""
    env = stack(name)
    for pod in pods(ray_job(env)):
        init, main = pod["initContainers"][0], pod["containers"][0]
        extended = {k: v for k, v in init["resources"]["requests"].items() if k not in ("cpu", "memory")}
        assert init["resources"]["limits"] == init["resources"]["requests"]
        if "--hca" in init["command"]:
            fabric = env.gang.pool.fabric.resource
            assert fabric is not None
            assert extended == {fabric: main["resources"]["requests"][fabric]}, name
        else:
            assert extended == {}, name
    assert any("--hca" in p["initContainers"][0]["command"] for p in pods(ray_job(stack("onprem-k8s"))))


def _local_command(env: Environment, pod: dict[str, Any], into: Path) -> list[str]:
    """The pod's rendered init container command, its program laid out under `into` as the kubelet lays
    out the ConfigMap its volume names (python3 = this environment's Python)."""
    (init,) = [c for c in pod["initContainers"] if c["name"] == "image-guard"]
    (mount,) = init["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    name = volume["configMap"]["name"]
    (code,) = [o for o in objects(env) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    assert code["metadata"]["namespace"] == env.job.tenant
    for item in volume["configMap"]["items"]:
        (into / item["path"]).write_text(code["data"][item["key"]], encoding="utf-8")
    at = mount["mountPath"] + "/"
    return [str(into / arg.removeprefix(at)) if arg.startswith(at) else arg for arg in init["command"]]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60)


def _run_init(env: Environment, into: Path) -> subprocess.CompletedProcess[str]:
    """The head's rendered init container, run here."""
    return _run(_local_command(env, pods(ray_job(env))[0], into))


def _like_this_machine(data: dict[str, Any], ray: str = "2.60.0") -> None:
    data["image"]["contents"] = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "ray": ray,
        "verl": "0.9.1",
        # No flash-attn on this machine: it declares torch's SDPA.
        "attention": "sdpa",
    }
    data["job"]["rollout"]["engine"] = "vllm"


def test_the_rendered_init_container_passes_a_matching_image_and_stops_another(tmp_path: Path) -> None:
    ok = _run_init(variant("gke-dev", _like_this_machine), tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _run_init(variant("gke-dev", lambda d: _like_this_machine(d, ray="2.59.0")), tmp_path)
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[-1].endswith("FAIL ray 2.59.0 declared, 2.60.0 in the image")


def _run_pod_guard(env: Environment, pod: dict[str, Any], into: Path) -> list[str]:
    """The pod's rendered guard run on this machine, a node with no NVIDIA driver and no verbs device (as a
    CPU node of the head pool): the reasons of its FAIL line, or none when it passes."""
    proc = _run(_local_command(env, pod, into))
    fail = [line.split(": FAIL ", 1)[1] for line in proc.stdout.splitlines() if ": FAIL " in line]
    return fail[0].split("; ") if fail else []


NODE_FACTS = ("NVIDIA driver", "HCAs")


@pytest.mark.parametrize("name", [s for s in K8S if stack(s).image.variant != "cpu"])
def test_the_head_on_a_cpu_node_is_refused_only_for_its_image_never_for_the_gpu_nodes_facts(
    name: str, tmp_path: Path
) -> None:
    """Heads run on CPU nodes (the head pool) and hold no GPU: a driver floor or the pool's HCAs in the head's
    guard would keep it in Init:CrashLoopBackOff while Kueue holds the gang's GPUs, on every retry. Here
    (no driver, no HCA, another image) the head's guard names only the image's differences; a worker's,
    on the same node, names the missing driver too."""
    env = stack(name)
    head, *workers = pods(ray_job(env))
    head_reasons = _run_pod_guard(env, head, tmp_path)
    assert not [r for r in head_reasons if any(fact in r for fact in NODE_FACTS)], head_reasons
    for worker in workers:
        assert any("NVIDIA driver" in r for r in _run_pod_guard(env, worker, tmp_path))


def test_pyxis_pulls_the_images_ref_in_enroot_syntax() -> None:
    script = render_files(stack("onprem-slurm"))[SBATCH_PATH]
    assert (
        "container_srun_args=('--container-image=registry.hpc.example.internal#grpo/verl:0.9.1-vllm0.24.0-ray2.60.0-gate'"
        in script
    )


def test_apptainer_pulls_the_pinned_ref() -> None:
    digest = "sha256:" + "1e" * 32

    def edit(data: dict[str, Any]) -> None:
        data["slurm"]["container"]["runtime"] = "apptainer"
        data["image"]["digest"] = digest

    script = render_files(variant("onprem-slurm", edit))[SBATCH_PATH]
    assert f"'docker://registry.hpc.example.internal/grpo/verl:0.9.1-vllm0.24.0-ray2.60.0-gate@{digest}'" in script


def test_a_local_copy_of_the_image_is_used_as_given() -> None:
    env = variant("onprem-slurm", lambda d: d["slurm"]["container"].update(image="/lustre/images/verl.sqsh"))
    assert "'--container-image=/lustre/images/verl.sqsh'" in render_files(env)[SBATCH_PATH]


def _function(script: str, name: str) -> str:
    """A shell function of the rendered script, its definition whole (`name() {` to the `}` closing it)."""
    lines = script.splitlines()
    start = lines.index(f"{name}() {{")
    return "\n".join(lines[start : lines.index("}", start) + 1])


def _line_starts(script: str, word: str) -> list[int]:
    """Offsets of the lines that begin with the word `word` (a call or its definition `word() {`)."""
    offsets, at = [], 0
    for line in script.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))  # the job's steps are indented inside `main`
        code = line[indent:]
        if code.startswith(word) and code[len(word) : len(word) + 1] in ("", " ", "\n", "&", ";", "(", "|"):
            offsets.append(at + indent)
        at += len(line)
    return offsets


def test_sbatch_guard_runs_before_the_gate_and_ray() -> None:
    for name in ("onprem-slurm", "local-slurm"):
        script = render_files(stack(name))[SBATCH_PATH]
        guard = next(i for i in _line_starts(script, "image_guard") if not script.startswith("image_guard()", i))
        # The first call of ray_step (its definition reads `ray_step() {`) starts Ray.
        ray_start = next(i for i in _line_starts(script, "ray_step") if not script.startswith("ray_step()", i))
        calls = [*_line_starts(script, "run_fabric_gate"), *_line_starts(script, "start_fabric_gate")]
        gate = min(i for i in calls if not script.startswith(("run_fabric_gate()", "start_fabric_gate()"), i))
        assert guard < gate and guard < ray_start


def _run_guard_block(env: Environment, entrypoint: str = "") -> subprocess.CompletedProcess[str]:
    """The rendered guard block in bash; `srun` runs its command once per node here."""
    harness = f"""
log() {{ printf 'grpo [test] %s\\n' "$*"; }}
fail() {{ log "ERROR: $*"; exit 1; }}
SLURM_JOB_NUM_NODES=2; container_srun_args=(); container_exec=()
srun() {{
  while [[ $1 == --* ]]; do shift; done
  local rc=0
  for node in node1 node2; do SLURMD_NODENAME=$node "$@" || rc=1; done
  return $rc
}}
{_function(render_files(env)[SBATCH_PATH], "image_guard")}
image_guard
log "gate and Ray would start now"
"""
    environ = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "GRPO_ENTRYPOINT": entrypoint}
    return subprocess.run(["bash", "-c", harness], capture_output=True, text=True, env=environ, timeout=60)


def test_sbatch_guard_passes_this_machines_stack_under_a_replacement_entrypoint() -> None:
    proc = _run_guard_block(stack("local-slurm"), entrypoint="true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "image guard [node2]: PASS" in proc.stdout and "gate and Ray would start now" in proc.stdout


def test_sbatch_guard_stops_the_job_before_anything_starts() -> None:
    env = variant("local-slurm", lambda d: d["image"]["contents"].update(ray="2.59.0"))
    proc = _run_guard_block(env, entrypoint="true")
    assert proc.returncode == 1
    assert "image guard [node1]: FAIL ray 2.59.0 declared, 2.60.0 in the image" in proc.stdout
    assert proc.stdout.splitlines()[-1].endswith(
        "ERROR: image guard: the image differs from the stack's image.contents (FAIL line above); nothing started"
    )
    assert "would start now" not in proc.stdout


def test_without_a_replacement_entrypoint_the_engine_is_checked() -> None:
    proc = _run_guard_block(stack("local-slurm"))
    assert proc.returncode == 1 and "vllm 0.24.0 declared, none in the image" in proc.stdout
