"""The sbatch's fabric gate and per-job Ray token, run in bash with Slurm's commands stubbed.

The gate's shell code runs for real (bash, the real `grpo-infra nccl verdict` on real-format
nccl-tests output); only `srun`/`timeout` and the Ray program are replaced by recorders, so these
tests check what the script launches, with which numbers, and what it writes to the job log.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.image import guard_program
from grpo_infra.slurmgen import SBATCH_PATH, render_files
from grpo_infra.spec import Environment
from tests.slurm.shell import function
from tests.slurm.variants import stack, variant

DATA = Path(__file__).parents[1] / "preflight" / "data"
VENV_BIN = str(Path(sys.executable).parent)


def _code(script: str) -> str:
    """The script without its comment lines: a search must match what bash runs, not what a comment says."""
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))


def _script(env: Environment) -> str:
    """The rendered sbatch without the image guard's embedded program (it names every tool it checks)."""
    return render_files(env)[SBATCH_PATH].replace(guard_program().rstrip("\n"), "")


def _block(script: str, name: str) -> str:
    """A marked section of the script, which may sit inside `main` (indented)."""
    lines = script.splitlines()
    marks = [line.strip() for line in lines]
    return "\n".join(lines[marks.index(f"# --- {name} ---") + 1 : marks.index(f"# --- end {name} ---")])


def _gate(edit: Any) -> Environment:
    return variant("onprem-slurm", lambda d: d["job"].setdefault("preflight", {}).setdefault("nccl", {}).update(edit))


def _run_gate(
    env: Environment, tmp_path: Path, *, nodes: int, gpus: int, fixture: str = "", rc: int = 0
) -> subprocess.CompletedProcess[str]:
    """The rendered gate block in bash: `timeout` (wrapping srun) prints `fixture`, `on_head` runs or records.

    nccl: `run_fabric_gate`; gloo: the barrier started in the background, then its outcome awaited."""
    script = _script(env)
    block = _block(script, "fabric gate")
    waiter = function(script, "wait_or_ray_step")
    run = "run_fabric_gate" if "run_fabric_gate()" in block else "start_fabric_gate barrier; finish_fabric_gate"
    harness = f"""
log() {{ printf 'grpo [test] %s\\n' "$*"; }}
fail() {{ log "ERROR: $*"; exit 1; }}
SLURM_JOB_NUM_NODES={nodes}; gpus_per_node={gpus}; cpus_per_node=224; GRPO_RESTART_COUNT=0
SLURM_JOB_ID=4242; SLURM_JOB_NAME=grpo; SLURM_SUBMIT_DIR={tmp_path}
container_srun_args=(); container_exec=()
timeout() {{
  printf '%s\\0' "$@" >"$SLURM_SUBMIT_DIR/launched"
  printf 'NCCL_DEBUG=%s NCCL_DEBUG_SUBSYS=%s NCCL_DEBUG_FILE=%s\\n' "${{NCCL_DEBUG:-}}" "${{NCCL_DEBUG_SUBSYS:-}}" \
    "${{NCCL_DEBUG_FILE-unset}}" >"$SLURM_SUBMIT_DIR/nccl-env"
  [[ -z "$FIXTURE" ]] || cat "$FIXTURE"
  return "$FIXTURE_RC"
}}
on_head() {{
  if [[ $1 == barrier ]]; then
    shift
    printf '%s\\0' "$@" >"$SLURM_SUBMIT_DIR/launched"
    cat "$FIXTURE"
    return "$FIXTURE_RC"
  fi
  "$@"
}}
{waiter}
sleep 60 >/dev/null 2>&1 & ray_step_pid=$!  # a Ray step that outlives the gate
trap 'kill "$ray_step_pid"' EXIT
{block}
{run} || fail "not every node joined"
log "training launched"
"""
    environ = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "FIXTURE": fixture, "FIXTURE_RC": str(rc)}
    return subprocess.run(["bash", "-c", harness], capture_output=True, text=True, env=environ, timeout=60)


def _launched(tmp_path: Path) -> list[str]:
    return (tmp_path / "launched").read_text().split("\0")[:-1]


def test_nccl_gate_runs_all_reduce_perf_on_every_gpu_before_ray(tmp_path: Path) -> None:
    env = stack("onprem-slurm")
    script = _script(env)
    assert script.index("\n  run_fabric_gate\n") < script.index("\n  ray_step\n")  # both steps of `main`
    proc = _run_gate(env, tmp_path, nodes=2, gpus=8, fixture=str(DATA / "ib_ndr_2x8_h100_all_reduce.txt"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = _launched(tmp_path)
    # onprem-slurm's gate: the documented defaults (1024 MiB x 20, 300 s), one rank per GPU, 5 warm-ups.
    assert argv == [
        "--kill-after=30", "300",
        "srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--cpus-per-task=28", "--gres=gpu:8",
        "--mpi=pmix", "--kill-on-bad-exit=1",
        "all_reduce_perf", "-b", "1024M", "-e", "1024M", "-g", "1", "-w", "5", "-n", "20",
    ]  # fmt: skip
    assert (
        tmp_path / "nccl-env"
    ).read_text().strip() == "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE=unset"
    out = proc.stdout.splitlines()
    assert "grpo [test] fabric gate: PASS fabric=infiniband transport=infiniband peak busbw=375.43 GB/s " in (
        next(line for line in out if "fabric gate: PASS" in line) + " "
    )
    assert out[-1] == "grpo [test] training launched"
    gate_dir = tmp_path / "grpo-4242-gate"
    assert (gate_dir / "all_reduce_perf.run0.log").read_text() == (DATA / "ib_ndr_2x8_h100_all_reduce.txt").read_text()
    assert (gate_dir / "verdict.run0.log").read_text().startswith("PASS fabric=infiniband")


def test_nccl_gate_stops_the_job_with_the_verdict_on_a_socket_fallback(tmp_path: Path) -> None:
    proc = _run_gate(
        stack("onprem-slurm"), tmp_path, nodes=2, gpus=8, fixture=str(DATA / "socket_fallback_2x8_all_reduce.txt")
    )
    assert proc.returncode == 1
    assert "training launched" not in proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("grpo [test] ERROR: fabric gate: FAIL fabric=infiniband transport=socket peak busbw=2.89")
    assert "16 rank(s) fell back to sockets instead of infiniband" in last
    assert "Ray not started" in last


def test_nccl_gate_reports_a_crashed_or_timed_out_all_reduce_perf(tmp_path: Path) -> None:
    proc = _run_gate(stack("onprem-slurm"), tmp_path, nodes=2, gpus=8, fixture="", rc=124)
    assert proc.returncode == 1
    last = proc.stdout.splitlines()[-1]
    assert "fabric gate: FAIL all_reduce_perf exited with status 124 (timeout after 300 s); " in last
    assert "error: all_reduce_perf.run0.log: no nccl-tests table or NCCL debug lines found; Ray not started" in last


def test_verdict_numbers_come_from_the_stacks_gate_and_the_allocation() -> None:
    env = _gate({"expectedBusbwGbps": 392.5, "fraction": 0.9, "sizeMib": 256, "iterations": 7, "timeoutSeconds": 120})
    script = _code(_script(env))
    assert (
        "python3 -m grpo_infra.cli nccl verdict /dev/stdin --fabric infiniband "
        '--gpus-per-node "$gpus_per_node" --nodes "$SLURM_JOB_NUM_NODES" --fraction 0.9 --expected-busbw 392.5'
    ) in script
    assert "all_reduce_perf -b 256M -e 256M -g 1 -w 5 -n 7 " in script
    assert "timeout --kill-after=30 120 " in script


def test_binary_and_mpi_plugin_come_from_the_spec() -> None:
    script = _code(_script(_gate({"allReducePerf": "/opt/nccl-tests/build/all_reduce_perf", "mpi": "pmi2"})))
    assert "--mpi=pmi2 " in script and " /opt/nccl-tests/build/all_reduce_perf -b " in script
    with pytest.raises(ValueError, match="allReducePerf"):
        _gate({"allReducePerf": "all_reduce_perf; rm -rf /"})


def test_gloo_gate_runs_the_ray_program_after_the_barrier_before_training(tmp_path: Path) -> None:
    env = stack("local-slurm")
    script = _script(env)
    assert "all_reduce_perf" not in script and "--mpi=" not in script
    # The gate runs in the barrier's process, right after it: one interpreter, one Ray connection; it is
    # started with Ray and awaited once the GCS answered.
    barrier = script.index('barrier=(python3 -c "$ray_ready_program"')
    gate = script.index('\n  start_fabric_gate "${barrier[@]}"')
    assert barrier < gate < script.index("\n  finish_fabric_gate \\") < script.index('log "training launched')
    assert 'on_head "$@" --gate grpo_infra.preflight.ray_allreduce ' in script
    fixture = tmp_path / "gate.out"
    fixture.write_text("PASS fabric=none backend=gloo transport=socket ranks=3 nodes=3\n  note: gloo\n")
    proc = _run_gate(env, tmp_path, nodes=3, gpus=8, fixture=str(fixture))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # local-slurm's stack file: gloo, 16 MiB x 5, 3 nodes of 8 GPUs, no fabric (so no threshold).
    assert _launched(tmp_path) == [
        "--gate", "grpo_infra.preflight.ray_allreduce", "--fabric", "none", "--gpus-per-node", "8", "--nodes", "3",
        "--backend", "gloo", "--fraction", "0.8", "--size-mib", "16", "--iters", "5", "--timeout", "300",
    ]  # fmt: skip
    assert "grpo [test] fabric gate: PASS fabric=none backend=gloo transport=socket ranks=3 nodes=3" in proc.stdout
    assert (tmp_path / "grpo-4242-gate" / "ray_allreduce.run0.log").read_text() == fixture.read_text()


def test_gloo_gate_failure_stops_the_job_with_its_fail_line(tmp_path: Path) -> None:
    fixture = tmp_path / "gate.out"
    fixture.write_text(
        "FAIL fabric=infiniband backend=gloo transport=socket ranks=3\n"
        "  fail: 3 rank(s) fell back to sockets instead of infiniband: rank 0\n"
    )
    proc = _run_gate(stack("local-slurm"), tmp_path, nodes=3, gpus=8, fixture=str(fixture), rc=1)
    assert proc.returncode == 1 and "training launched" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        "grpo [test] ERROR: fabric gate: FAIL fabric=infiniband backend=gloo transport=socket ranks=3; "
        "3 rank(s) fell back to sockets instead of infiniband: rank 0 (exit 1); training not started "
        f"(output: {tmp_path}/grpo-4242-gate/ray_allreduce.run0.log)"
    )


@pytest.mark.parametrize("name", ["local-slurm", "onprem-slurm"])
def test_gate_switched_off_leaves_no_gate(name: str) -> None:
    env = variant(name, lambda d: d["job"].setdefault("preflight", {}).setdefault("nccl", {}).update(enabled=False))
    script = _script(env)
    assert "_fabric_gate" not in script and "ray_allreduce" not in script and "all_reduce_perf" not in script
    assert "# Fabric gate: switched off in the stack" in script
    assert "_fabric_gate" in _script(stack(name))


def _run_auth(env: Environment, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The rendered auth block in bash; returns its output and the Ray variables it exported."""
    harness = f"""
log() {{ printf 'grpo [test] %s\\n' "$*"; }}
fail() {{ log "ERROR: $*"; exit 1; }}
GRPO_RAY_TMP_ROOT={tmp_path}/grpo-4242
{_block(_script(env), "ray auth")}
env | grep '^RAY_AUTH' >"{tmp_path}/exported"
"""
    environ = {**os.environ, "RAY_AUTH_TOKEN_PATH": "/home/user/.ray/other", "RAY_AUTH_TOKEN": "stale"}
    proc = subprocess.run(["bash", "-c", harness], capture_output=True, text=True, env=environ, timeout=30)
    exported = dict(line.split("=", 1) for line in (tmp_path / "exported").read_text().splitlines())
    return proc, exported


def test_every_run_gets_a_fresh_token_never_printed(tmp_path: Path) -> None:
    env = stack("local-slurm")
    assert env.slurm is not None and env.slurm.ray_auth == "token"
    proc, exported = _run_auth(env, tmp_path / "a")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    token = exported["RAY_AUTH_TOKEN"]
    assert re.fullmatch(r"[0-9a-f]{64}", token) and exported["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_TOKEN_PATH" not in exported  # a token file of the user's would be ignored anyway
    token_file = tmp_path / "a" / "grpo-4242" / "ray-auth-token"
    assert token_file.read_text().strip() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    _, again = _run_auth(env, tmp_path / "b")
    assert again["RAY_AUTH_TOKEN"] != token
    script = _script(env)
    assert token not in script
    # The one place the script expands the token's value: writing the mode-600 file.
    expanded = [line.strip() for line in script.splitlines() if re.search(r"\$\{?RAY_AUTH_TOKEN\b(?!_)", line)]
    assert expanded == [
        '(umask 077 && mkdir -p "$GRPO_RAY_TMP_ROOT" && printf \'%s\\n\' "$RAY_AUTH_TOKEN" >"$ray_token_file") \\'
    ]


def test_ray_auth_disabled_is_explicit(tmp_path: Path) -> None:
    env = variant("local-slurm", lambda d: d["slurm"].update(rayAuth="disabled"))
    proc, exported = _run_auth(env, tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert exported == {"RAY_AUTH_MODE": "disabled"}
    assert not (tmp_path / "grpo-4242").exists()
    with pytest.raises(ValueError, match="rayAuth"):
        variant("local-slurm", lambda d: d["slurm"].update(rayAuth="password"))


def test_a_barrier_that_fails_before_the_gate_is_not_reported_as_a_fabric_failure(tmp_path: Path) -> None:
    fixture = tmp_path / "barrier.out"
    fixture.write_text("grpo: joined 2/3 nodes, 16/24 GPUs\n")
    proc = _run_gate(stack("local-slurm"), tmp_path, nodes=3, gpus=8, fixture=str(fixture), rc=1)
    assert proc.returncode == 1 and "training launched" not in proc.stdout
    assert "fabric gate: FAIL" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == "grpo [test] ERROR: not every node joined"


def test_the_nccl_gate_reads_ncclS_lines_even_when_job_debug_sends_them_to_files(tmp_path: Path) -> None:
    """job.debug.ncclDebug gives every process an NCCL_DEBUG_FILE; the gate's ranks must not inherit it, or
    NCCL writes its INFO lines there and the verdict sees no transport."""
    env = stack("onprem-slurm")
    os.environ["NCCL_DEBUG_FILE"] = str(tmp_path / "nccl.%h.%p.log")
    try:
        proc = _run_gate(env, tmp_path, nodes=2, gpus=8, fixture=str(DATA / "ib_ndr_2x8_h100_all_reduce.txt"))
    finally:
        del os.environ["NCCL_DEBUG_FILE"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NCCL_DEBUG=INFO" in (tmp_path / "nccl-env").read_text()
    assert "NCCL_DEBUG_FILE=unset" in (tmp_path / "nccl-env").read_text()
