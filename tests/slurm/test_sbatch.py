"""The GRPO sbatch script: the exact gang, a job-private Ray, verl's own overrides, every runtime."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_infra import verl
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment
from tests.slurm import shell
from tests.slurm.variants import SLURM_STACKS, disaggregated_variant, stack, variant

SHELLCHECK = Path(sys.executable).with_name("shellcheck")


def _script(env: Environment) -> str:
    return render_files(env)[SBATCH_PATH]


def _code(script: str) -> str:
    """The script without its comment lines: a search must match what bash runs, not what a comment says."""
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))


def _directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def _runtime(runtime: str, image: str | None = None, mounts: list[str] | None = None) -> Any:
    def edit(d: dict[str, Any]) -> None:
        d["slurm"]["container"] = {"runtime": runtime, **({"image": image} if image else {}), "mounts": mounts or []}

    return edit


VARIANTS: dict[str, Environment] = {
    "local-slurm": stack("local-slurm"),
    "onprem-slurm": stack("onprem-slurm"),
    "local-pyxis": variant("local-slurm", _runtime("pyxis", "nvcr.io#verl/verl:0.6.0", ["/data:/data"])),
    "local-apptainer": variant("local-slurm", _runtime("apptainer", "/images/verl.sif", ["/data", "/ckpt:/ckpt"])),
    "onprem-none": variant("onprem-slurm", _runtime("none")),
    "local-shared": variant("local-slurm", lambda d: d["slurm"].update(oversubscribe="yes")),
    "onprem-apptainer": variant("onprem-slurm", _runtime("apptainer", "/images/verl.sif", ["/lustre:/lustre"])),
    "local-disaggregated": disaggregated_variant(),
    "local-no-gate-no-auth": variant(
        "local-slurm",
        lambda d: (d["slurm"].update(rayAuth="disabled"), d["job"]["preflight"]["nccl"].update(enabled=False)),
    ),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_bash_accepts_it(name: str, tmp_path: Path) -> None:
    path = tmp_path / "grpo.sbatch"
    path.write_text(_script(VARIANTS[name]))
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _shipped(script: str) -> list[tuple[str, set[str]]]:
    """Each `bash -c "$(declare -f A B ...); ENTRY"` of `script`: the entry and the functions shipped with it."""
    joined = script.replace("\\\n", " ")
    return [(m[2], set(m[1].split())) for m in re.finditer(r"declare -f ([\w ]+?)\s*\);\s*(\w+)", joined)]


def _calls(script: str, name: str, defined: set[str]) -> set[str]:
    """The script's own functions that the body of function `name` names (its comments aside)."""
    body = _code(shell.function(script, name)).split("{", 1)[1]
    return (set(re.findall(r"[A-Za-z_]\w*", body)) & defined) - {name}


@pytest.mark.parametrize("name", VARIANTS)
def test_every_function_a_node_runs_is_shipped_to_it(name: str) -> None:
    """A step's `bash -c` on another node knows only the functions `declare -f` sent it: one left out is "command
    not found" there, and only on the path that calls it (a worker's second `ray start` ended a job so)."""
    script = _script(VARIANTS[name])
    defined = set(re.findall(r"^(\w+)\(\) \{", script, re.M))
    steps = _shipped(script)
    assert {entry for entry, _ in steps} >= {"prepare_node", "start_ray_node", "stop_ray_under"}
    for entry, shipped in steps:
        assert entry in shipped, f"{entry} runs on the nodes but is not shipped"
        missing = {f: _calls(script, f, defined) - shipped for f in shipped}
        assert not {f: m for f, m in missing.items() if m}, f"{entry}: called on the nodes but not shipped"


@pytest.mark.parametrize("name", VARIANTS)
def test_shellcheck_is_clean(name: str, tmp_path: Path) -> None:
    path = tmp_path / "grpo.sbatch"
    script = _script(VARIANTS[name])
    path.write_text(script)
    proc = subprocess.run([str(SHELLCHECK), "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    for line in script.splitlines():
        if "shellcheck disable=" in line:
            assert re.search(r"disable=SC\d+(,SC\d+)* # \S", line), f"a disabled warning needs its reason: {line}"


def test_requests_exactly_the_gang() -> None:
    env = stack("onprem-slurm")
    assert _directives(_script(env)) == [
        "--job-name=grpo-qwen25-32b",
        "--partition=grpo-h100",
        "--account=alignment",
        "--qos=grpo-high",
        "--nodes=8",
        "--ntasks-per-node=1",
        "--gres=gpu:h100:8",
        "--cpus-per-task=224",
        "--exclusive",
        "--time=2-00:00:00",
        "--requeue",
        "--signal=B:USR1@120",
        "--open-mode=append",
        "--output=%x-%j.out",
    ]


def test_sharing_nodes_drops_exclusive() -> None:
    directives = _directives(_script(VARIANTS["local-shared"]))
    assert "--exclusive" not in directives and "--oversubscribe" in directives
    assert "--exclusive" in _directives(_script(stack("local-slurm")))


def test_a_partition_of_several_pools_constrains_to_the_jobs_pool() -> None:
    assert not any(d.startswith("--constraint") for d in _directives(_script(stack("local-slurm"))))

    def add_pool(d: dict[str, Any]) -> None:
        d["pools"].append({**d["pools"][0], "name": "other", "hosts": "other[1-2]"})
        d["tenants"][0]["gpuQuota"] = 8

    assert "--constraint=sim" in _directives(_script(variant("local-slurm", add_pool)))


def _verl_argv(script: str, nodes: int, gpus: int) -> list[str]:
    """The verl command array exactly as bash sees it for an allocation of `nodes` × `gpus`."""
    lines = [line.strip() for line in script.splitlines()]  # the command is indented inside `main`
    block = "\n".join(lines[lines.index("# --- verl command ---") + 1 : lines.index("# --- end verl command ---")])
    program = f"SLURM_JOB_NUM_NODES={nodes}\ngpus_per_node={gpus}\n{block}\nprintf '%s\\0' \"${{verl_command[@]}}\"\n"
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


@pytest.mark.parametrize("name", SLURM_STACKS)
def test_verl_command_is_exactly_verl_py(name: str) -> None:
    env = stack(name)
    argv = _verl_argv(_script(env), env.gang.nodes, env.gang.gpus_per_node)
    assert argv == verl.command(env)


def test_gang_shape_comes_from_the_allocation() -> None:
    env = stack("onprem-slurm")
    argv = _verl_argv(_script(env), 3, 4)
    assert f"{verl.NNODES}=3" in argv and f"{verl.N_GPUS_PER_NODE}=4" in argv
    assert f"{verl.NNODES}={env.gang.nodes}" not in argv


def test_ray_is_job_private_and_bound_to_the_chosen_address() -> None:
    script = _code(_script(stack("local-slurm")))
    assert "ray stop" not in script
    assert '--dashboard-host="${GRPO_RAY_DASHBOARD_HOST:-$addr}"' in script and '--node-ip-address="$addr"' in script
    assert "--dashboard-host=0.0.0.0" not in script
    assert '--temp-dir="$temp_dir"' in script and '"$GRPO_RAY_TMP_ROOT/$node"' in script
    assert '--num-cpus="$cpus"' in script and '--num-gpus="$gpus"' in script
    assert "export RAY_USAGE_STATS_ENABLED=0" in script
    assert "trap finish EXIT" in script and "stop_job_ray\n" in script and "trap on_time_limit USR1" in script
    assert "scontrol show hostnames" in script
    assert "GRPO_RAY_INTERFACE=eth0" in script


def test_test_hooks_are_documented_and_read() -> None:
    script = _script(stack("local-slurm"))
    for hook in ("GRPO_ENTRYPOINT", "GRPO_RAY_READY_TIMEOUT", "GRPO_RAY_TMPDIR"):
        assert f"#   {hook} " in script, f"{hook} is not documented in the script's header"
        assert "${" + hook in _code(script), f"{hook} is not read"


def test_secrets_are_required_from_the_environment_never_written() -> None:
    script = _code(_script(stack("onprem-slurm")))
    assert '[[ -n ${WANDB_API_KEY:-} ]] || fail "WANDB_API_KEY is not set' in script
    assert "WANDB_API_KEY=" not in script
    assert "export NCCL_IB_QPS_PER_CONNECTION='4'" in script
    assert "export NCCL_IB_HCA='=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7'" in script
    assert "export NCCL_SOCKET_IFNAME='=ib0'" in script
    assert "export GLOO_SOCKET_IFNAME='ib0'" in script


def test_container_runtimes() -> None:
    pyxis = _script(VARIANTS["local-pyxis"])
    assert (
        "container_srun_args=('--container-image=nvcr.io#verl/verl:0.6.0' '--container-mounts=/data:/data' "
        "'--container-workdir=/tmp' --no-container-mount-home \"--container-name=$GRPO_CONTAINER_NAME\")"
    ) in pyxis
    assert "container_exec=()" in pyxis
    apptainer = _script(VARIANTS["local-apptainer"])
    assert "container_exec=(apptainer exec --nv --no-home --pwd '/tmp' --bind '/data,/ckpt:/ckpt'" in apptainer
    assert "container_srun_args=()" in apptainer
    plain = _script(stack("local-slurm"))
    assert "container_srun_args=()" in plain and "container_exec=()" in plain
    assert "apptainer" not in plain and "--container-image" not in plain
    onprem = _script(stack("onprem-slurm"))
    assert "--container-mounts=/lustre/models:/models,/lustre/data:/data,/lustre/checkpoints:/checkpoints" in onprem


def test_readiness_barrier_is_the_shipped_program() -> None:
    script = _script(stack("local-slurm"))
    program = (Path(__file__).parents[2] / "grpo_infra" / "lifecycle" / "ray_ready.py").read_text()
    assert program.rstrip("\n") in script
    assert "joined {nodes}/{args.nodes} nodes, {gpus}/{args.gpus} GPUs" in program
