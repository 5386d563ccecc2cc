"""How the sbatch's steps enter the image, where node addresses are found, and the time-limit checkpoint.

pyxis and enroot do not run here, so the pyxis cases read the rendered srun lines and run the script's own
shell functions against a stand-in `enroot` that only lists and records; the behaviour they encode is
pyxis's (NVIDIA/pyxis args.c and pyxis_slurmstepd.c, cited in grpo_infra/slurmgen/sbatch.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment
from tests.slurm.test_sbatch import VARIANTS
from tests.slurm.variants import stack


def _script(env: Environment) -> str:
    return render_files(env)[SBATCH_PATH]


def _function(script: str, name: str) -> str:
    """The text of one shell function of the script, `name() {` to its closing `}`."""
    match = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", script, re.M | re.S)
    assert match, f"no function {name} in the script"
    return match.group(0)


def _srun_lines(script: str) -> list[str]:
    """Each srun command of the script, continuation lines joined."""
    joined = script.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if re.search(r"(^|[ (])srun ", line) and "#" not in line[:2]]


def test_pyxis_steps_share_one_named_container_per_node() -> None:
    script = _script(stack("onprem-slurm"))
    assert 'export GRPO_CONTAINER_NAME="grpo-${SLURM_JOB_ID}"' in script
    assert (
        "container_srun_args=('--container-image=registry.hpc.example.internal#grpo/verl:0.9.1-vllm0.24.0-ray2.60.0-gate' "
        "'--container-mounts=/lustre/models:/models,/lustre/data:/data,/lustre/checkpoints:/checkpoints' "
        "'--container-workdir=/checkpoints' --no-container-mount-home \"--container-name=$GRPO_CONTAINER_NAME\")"
    ) in script
    into_image = [line for line in _srun_lines(script) if '"${container_srun_args[@]}"' in line]
    # The image guard, the nccl-tests gate, the Ray steps of every node, and on_head (barrier, verdict,
    # driver): all named.
    assert len(into_image) == 4
    assert any('--nodelist="$GRPO_RAY_HEAD_NODE"' in line for line in into_image)  # on_head attaches
    # The host steps (addresses, the sweep after a dead Ray step, container removal) run outside the image.
    on_host = [line for line in _srun_lines(script) if "container_srun_args" not in line]
    assert len(on_host) == 3 and all("--gres=none" in line for line in on_host)


def test_requeued_job_finds_none_of_its_containers(tmp_path: Path) -> None:
    """Both of pyxis's names for the job's container go (scope global: pyxis_<name>; scope job:
    pyxis_<jobid>_<name>); other jobs' containers stay."""
    script = _script(stack("onprem-slurm"))
    removed = tmp_path / "removed"
    enroot = tmp_path / "bin" / "enroot"
    enroot.parent.mkdir()
    enroot.write_text(
        "#!/bin/bash\n"
        'if [[ $1 == list ]]; then printf "%s\\n" pyxis_grpo-42 pyxis_42_grpo-42 pyxis_grpo-421 pyxis_7_grpo-7 '
        "pyxis_42.0; exit 0; fi\n"
        f'[[ $1 == remove && $2 == --force ]] && echo "$3" >> {removed}\n'
    )
    enroot.chmod(0o755)
    program = 'log() { echo "$*"; }\n' + _function(script, "remove_job_containers") + "remove_job_containers\n"
    env = {**os.environ, "PATH": f"{enroot.parent}:{os.environ['PATH']}", "SLURM_JOB_ID": "42"}
    proc = subprocess.run(
        ["bash", "-c", program], env={**env, "GRPO_CONTAINER_NAME": "grpo-42"}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert removed.read_text().split() == ["pyxis_grpo-42", "pyxis_42_grpo-42"]
    # Without a named container (runtime none or Apptainer) nothing is touched.
    removed.unlink()
    proc = subprocess.run(["bash", "-c", program], env={**env, "GRPO_CONTAINER_NAME": ""}, capture_output=True)
    assert proc.returncode == 0 and not removed.exists()


def test_apptainer_binds_the_ray_temp_root_and_keeps_home_out() -> None:
    script = _script(VARIANTS["local-apptainer"])
    assert (
        "container_exec=(apptainer exec --nv --no-home --pwd '/tmp' --bind '/data,/ckpt:/ckpt' "
        "--bind \"$GRPO_RAY_TMP_ROOT\" '/images/verl.sif')"
    ) in script
    assert 'export GRPO_CONTAINER_NAME=""' in script


def test_node_addresses_are_resolved_on_the_host() -> None:
    script = _script(stack("onprem-slurm"))
    # The program each node runs inside the image has no way to resolve: it only looks its address up.
    ray_step = _function(script, "ray_step")
    assert "ray_node_address" not in ray_step and "node_entry" in ray_step
    start = _function(script, "start_ray_node")
    assert "ip -4" not in start and "ray_node_address" not in start and 'node_entry "$node"' in start
    find = _function(script, "find_node_addresses")
    assert "ray_node_address" in find and "prepare_node" in find and "--gres=none" in find
    assert "container_srun_args" not in find


def test_a_node_reads_its_own_address_from_the_hosts_answers() -> None:
    script = _script(stack("onprem-slurm"))
    program = _function(script, "node_entry") + 'node_entry "$1"'
    env = {**os.environ, "GRPO_RAY_NODE_ADDRESSES": "gpu001=10.1.0.1/ib0,gpu002=10.1.0.2/ib0,gpu010=10.1.0.10/eth1"}

    def lookup(node: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", program, "-", node], env=env, capture_output=True, text=True)

    assert lookup("gpu002").stdout == "10.1.0.2/ib0\n"
    assert lookup("gpu010").stdout == "10.1.0.10/eth1\n"
    assert lookup("gpu01").returncode == 1 and lookup("gpu01").stdout == ""


def _checkpoint_block(script: str) -> str:
    start = script.index("# --- time-limit checkpoint ---")
    return script[start : script.index("# --- end time-limit checkpoint ---")]


def test_verl_is_told_when_to_take_its_last_checkpoint(tmp_path: Path) -> None:
    """verl 0.9.1 saves once a step ends within 60 s + its longest step of
    MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP (verl/utils/checkpoint/checkpoint_manager.py,
    should_save_ckpt_esi): the sbatch sets it to the run's end less the signal lead and the stack's save time."""
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/bash\necho 2026-11-30T21:00:00\n")
    squeue.chmod(0o755)
    block = _checkpoint_block(_script(stack("onprem-slurm")))
    program = (
        "log() { :; }\n" + block + 'set_checkpoint_deadline\necho "$MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"\n'
    )
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_ID": "7", "TZ": "UTC"}
    proc = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    end = datetime(2026, 11, 30, 21, 0, 0, tzinfo=UTC).timestamp()
    # onprem-slurm: USR1 120 s before the limit, checkpointSaveSeconds 600.
    assert proc.stdout.strip() == str(int(end) - 120 - 600)


def test_no_end_time_means_no_early_checkpoint(tmp_path: Path) -> None:
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/bash\necho N/A\n")
    squeue.chmod(0o755)
    block = _checkpoint_block(_script(stack("onprem-slurm")))
    program = (
        'log() { echo "$*"; }\n'
        + block
        + 'set_checkpoint_deadline 2>&1\necho "[${MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP:-}]"\n'
    )
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    env.pop("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP", None)
    proc = subprocess.run(["bash", "-c", program], env=env, capture_output=True, text=True)
    assert proc.stdout.splitlines() == [
        "no end time for job 7 (squeue said 'N/A'): checkpoints only every 10 steps",
        "[]",
    ]
