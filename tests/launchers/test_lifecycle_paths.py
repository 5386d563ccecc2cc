"""Every promise of the Ray node lifecycle, on the rendered files of every launch path it serves (the sbatch,
the hand-started head and worker, SkyPilot's `run`, dstack's command), each run in bash in seconds: the
run's port block holds every port `ray start` is given, the stop ends the GCS last, NCCL and Gloo get an
interface on every path (the fallback included), the sbatch's per-job temp dirs, signal and requeue."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from grpo_infra.ports import ray_ports
from grpo_infra.spec.slurm import PortRange
from tests.slurm.shell import functions
from tests.slurm.variants import stack

LIBRARY = (
    "log",
    "fail",
    "ray_port_block",
    "ray_ports_clear",
    "ray_start_args",
    "ray_socket_interfaces",
    "interface_of",
)


def _scripts() -> dict[str, tuple[str, PortRange, int]]:
    """Each launch path's node script, with the port range its stack gives it and its pool's block size."""
    local, gke, eks = stack("local-slurm"), stack("gke-dev"), stack("eks-prod")
    from grpo_infra.launchers import render_files as launcher_files
    from grpo_infra.slurmgen import SBATCH_PATH
    from grpo_infra.slurmgen import render_files as slurm_files

    assert local.slurm and local.launchers and local.launchers.ray
    assert gke.launchers and gke.launchers.skypilot and eks.launchers and eks.launchers.dstack
    ray = launcher_files(local)
    sky = yaml.safe_load(launcher_files(gke)["skypilot/task.yaml"])
    dstack = yaml.safe_load(launcher_files(eks)["dstack/task.dstack.yml"])
    return {
        "sbatch": (slurm_files(local)[SBATCH_PATH], local.slurm.ray_ports, local.gang.pool.ray_block_size),
        "ray/head.sh": (ray["ray/head.sh"], local.launchers.ray.ray_ports, local.gang.pool.ray_block_size),
        "ray/worker.sh": (ray["ray/worker.sh"], local.launchers.ray.ray_ports, local.gang.pool.ray_block_size),
        "skypilot run": (sky["run"], gke.launchers.skypilot.ray_ports, gke.gang.pool.ray_block_size),
        "dstack command": (dstack["commands"][0], eks.launchers.dstack.ray_ports, eks.gang.pool.ray_block_size),
    }


SCRIPTS = _scripts()


def _bash(program: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize("path", SCRIPTS)
@pytest.mark.parametrize("role", ["head", "worker"])
def test_every_port_ray_start_is_given_is_in_the_runs_block(path: str, role: str) -> None:
    script, ports, size = SCRIPTS[path]
    run = 7
    program = functions(script, *LIBRARY) + (
        f'ray_port_block {run}; ray_start_args {role} 10.0.0.5 /tmp/grpo-7/n1 4 8 10.0.0.1; printf "%s\\n" "${{ray_args[@]}}"; '
        'echo "--autoscaler-metric-port=${AUTOSCALER_METRIC_PORT:-0}" "--dashboard-metric-port=${DASHBOARD_METRIC_PORT:-0}"'
    )
    proc = _bash(program)
    assert proc.returncode == 0, proc.stderr
    args = dict(a.removeprefix("--").split("=", 1) for a in proc.stdout.split() if "=" in a)
    block = ray_ports(ports.start, ports.end, run, size)
    given = {k: int(v) for k, v in args.items() if k.endswith("port") and v != "0"}
    assert given, args
    assert all(block.gcs <= p <= block.max_worker for p in given.values()), (block, given)
    assert args["node-ip-address"] == "10.0.0.5" and args["temp-dir"] == "/tmp/grpo-7/n1"
    assert (args["min-worker-port"], args["max-worker-port"]) == (str(block.min_worker), str(block.max_worker))
    if role == "head":
        # The dashboard's API server runs even with the dashboard off: its port is the block's too.
        assert int(args["dashboard-port"]) == block.dashboard and int(args["port"]) == block.gcs
        # The metrics servers Ray starts on fixed ports of its own unless told: told the block's.
        assert int(args["autoscaler-metric-port"]) == block.autoscaler_metrics
        assert int(args["dashboard-metric-port"]) == block.dashboard_metrics
        assert args["dashboard-host"] != "0.0.0.0" if "dashboard-host" in args else True
    else:
        assert args["address"] == f"10.0.0.1:{block.gcs}"


@pytest.mark.parametrize("path", SCRIPTS)
def test_nccl_and_gloo_get_an_interface_on_every_path_the_fallback_included(path: str) -> None:
    script, _, _ = SCRIPTS[path]
    show = 'ray_socket_interfaces ens5; echo "$NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"'
    body = functions(script, *LIBRARY)
    # The stack named no interface: the one carrying Ray's address.
    unset = _bash(body + show, {"GRPO_RAY_INTERFACE": ""} | {"NCCL_SOCKET_IFNAME": "", "GLOO_SOCKET_IFNAME": ""})
    assert unset.stdout.split() == ["=ens5", "ens5"], unset.stderr
    # The node lacks the stack's Ray interface (the Slurm fallback): NCCL follows Ray to the fallback's interface.
    fallback = _bash(
        body + show, {"GRPO_RAY_INTERFACE": "eth0", "NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    )
    assert fallback.stdout.split() == ["=ens5", "ens5"]
    # Interfaces the fabric names stay.
    fabric = _bash(
        body + show, {"GRPO_RAY_INTERFACE": "eth0", "NCCL_SOCKET_IFNAME": "=ib0,ib1", "GLOO_SOCKET_IFNAME": "ib0,ib1"}
    )
    assert fabric.stdout.split() == ["=ib0,ib1", "ib0,ib1"]
    # And every path calls it with the interface of the address it found.
    caller = "start_ray_node" if path == "sbatch" else "grpo_address"
    assert 'ray_socket_interfaces "${' in functions(script, caller)


@pytest.mark.parametrize("path", SCRIPTS)
def test_the_stop_ends_the_gcs_last_and_only_this_runs_ray(path: str, tmp_path: Path) -> None:
    script, _, _ = SCRIPTS[path]
    mine, other, order = tmp_path / "grpo-7" / "node1", tmp_path / "grpo-8" / "node1", tmp_path / "order"
    mine.mkdir(parents=True), other.mkdir(parents=True)
    fake = (
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(order)!r}, 'a').write(sys.argv[1].rsplit('/', 1)[-1] + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(tmp_path)!r} + '/ready-%d' % os.getpid(), 'w').close()\n"
        "time.sleep(60)\n"
    )
    procs = [
        subprocess.Popen(["python3", "-c", fake, f"/x/{name}", f"--temp_dir={directory}"], start_new_session=True)
        for name, directory in (("gcs_server", mine), ("raylet", mine), ("agent", mine), ("raylet", other))
    ]
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready-*"))) < 4:
            assert time.monotonic() < deadline, "the stand-ins did not start"
            time.sleep(0.05)
        functions_ = ("log", "ray_pids_under", "still_running", "stop_ray_under")
        proc = _bash(functions(script, *functions_) + f"stop_ray_under {mine}", {"GRPO_RAY_STOP_GRACE": "5"})
        assert proc.returncode == 0, proc.stderr
        stopped = order.read_text().split()
        assert sorted(stopped) == ["agent", "gcs_server", "raylet"] and stopped[-1] == "gcs_server"
        assert procs[3].poll() is None  # another run's Ray on the same machine
    finally:
        for p in procs:
            p.kill()
            p.wait()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "ray stop" not in code and "pkill" not in code


def test_the_sbatch_gives_each_node_of_the_job_its_own_temp_dir_and_address() -> None:
    script, _, _ = SCRIPTS["sbatch"]
    program = (
        functions(script, "log", "fail", "ray_socket_interfaces", "node_entry", "start_ray_node")
        + 'run_ray_node() { echo "$@"; }\nstart_ray_node'
    )
    env = {
        "SLURMD_NODENAME": "node2", "GRPO_RAY_HEAD_NODE": "node1", "GRPO_RAY_HEAD_ADDRESS": "10.0.0.1",
        "GRPO_RAY_TMP_ROOT": "/tmp/grpo-42", "SLURM_CPUS_PER_TASK": "4", "SLURM_GPUS_ON_NODE": "8",
        "GRPO_RAY_NODE_ADDRESSES": "node1=10.0.0.1/eth0,node2=10.0.0.2/eth0",
    }  # fmt: skip
    proc = _bash(program, env)
    assert proc.stdout.split() == ["worker", "10.0.0.2", "/tmp/grpo-42/node2", "4", "8", "10.0.0.1"], proc.stderr
    assert 'export GRPO_RAY_TMP_ROOT="${GRPO_RAY_TMPDIR:-/tmp}/grpo-${SLURM_JOB_ID}"' in script
    assert 'ray_port_block "$SLURM_JOB_ID"' in script


@pytest.mark.parametrize("requeue", ["1", "0"])
def test_the_time_limit_signal_reaches_the_batch_shell_and_requeues(requeue: str, tmp_path: Path) -> None:
    script, _, _ = SCRIPTS["sbatch"]
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@120" in script
    assert "\n  trap on_time_limit USR1\n" in script  # a step of `main`
    calls = tmp_path / "calls"
    program = (
        functions(script, "log", "on_time_limit")
        + f'stop_job_ray() {{ echo stop >>{calls}; }}\nscontrol() {{ echo "scontrol $*" >>{calls}; }}\n'
        + "trap on_time_limit USR1\nkill -USR1 $$\nsleep 5\necho not-stopped"
    )
    proc = _bash(program, {"SLURM_JOB_ID": "42", "GRPO_CHECKPOINT_DIR": "/ckpt", "GRPO_REQUEUE_ON_SIGNAL": requeue})
    assert proc.returncode == 0 and "not-stopped" not in proc.stdout
    expected = ["stop", "scontrol requeue 42"] if requeue == "1" else ["stop"]
    assert calls.read_text().splitlines() == expected


def test_the_launchers_own_placement_settings_ask_for_the_gang() -> None:
    gke, eks = stack("gke-dev"), stack("eks-prod")
    from grpo_infra.launchers import render_files as launcher_files

    sky = yaml.safe_load(launcher_files(gke)["skypilot/task.yaml"])
    assert sky["num_nodes"] == gke.gang.nodes
    assert sky["resources"]["accelerators"].endswith(f":{gke.gang.gpus_per_node}")
    files = launcher_files(eks)
    task, fleet = yaml.safe_load(files["dstack/task.dstack.yml"]), yaml.safe_load(files["dstack/fleet.dstack.yml"])
    assert task["nodes"] == len(fleet["ssh_config"]["hosts"]) == eks.gang.nodes and fleet["placement"] == "cluster"
    assert task["fleets"] == [fleet["name"]]
