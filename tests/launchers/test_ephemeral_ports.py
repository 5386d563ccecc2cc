"""The lifecycle refuses a port block the node's kernel may hand to an outgoing connection: it reads the node's
real net.ipv4.ip_local_port_range (and ip_local_reserved_ports) at start, on every launch path.

Each case runs the rendered shell in a fresh network namespace (`unshare --net`, root) whose sysctls the test
sets as a DGX image would: the kernel's own files, no stand-in path."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.launchers.test_lifecycle_paths import SCRIPTS
from tests.slurm.shell import functions


def _netns_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = "echo '9000 65000' >/proc/sys/net/ipv4/ip_local_port_range"
    return subprocess.run(["unshare", "--net", "bash", "-c", probe], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not _netns_usable(), reason="needs root and `unshare --net` to set a namespace's sysctls"
)


def _in_netns(program: str, port_range: str, reserved: str = "") -> subprocess.CompletedProcess[str]:
    """`program` in a new network namespace whose ephemeral range is `port_range` and reserved ports `reserved`."""
    setup = f"echo '{port_range}' >/proc/sys/net/ipv4/ip_local_port_range || exit 99\n"
    if reserved:
        setup += f"echo '{reserved}' >/proc/sys/net/ipv4/ip_local_reserved_ports || exit 99\n"
    proc = subprocess.run(
        ["unshare", "--net", "bash", "-c", setup + program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 99, proc.stderr
    return proc


CLEAR = functions(SCRIPTS["sbatch"][0], "ray_ports_clear")


def test_a_block_below_the_stock_range_is_clear() -> None:
    proc = _in_netns(CLEAR + "ray_ports_clear gpu001 20000 20319", "32768 60999")
    assert (proc.returncode, proc.stdout) == (0, "")


def test_a_block_inside_a_dgx_range_is_refused_in_one_line() -> None:
    proc = _in_netns(CLEAR + "ray_ports_clear gpu001 20000 20319", "9000 65000")
    assert proc.returncode == 1
    assert proc.stdout == (
        "Ray's ports 20000-20319 overlap the ephemeral port range 9000-65000 of node gpu001 "
        "(net.ipv4.ip_local_port_range): 320 of them (20000-20319) are not in net.ipv4.ip_local_reserved_ports, "
        "and any outgoing connection can take one before Ray binds it; add 20000-20319 to "
        "net.ipv4.ip_local_reserved_ports on the node, or give Ray ports outside 9000-65000\n"
    )


def test_reserved_ports_are_never_handed_out_so_a_reserved_block_is_clear() -> None:
    # ip-sysctl.rst: reserved ports "will not be used by automatic port assignments".
    proc = _in_netns(CLEAR + "ray_ports_clear gpu001 20000 20319", "9000 65000", "8080,19000-20400")
    assert (proc.returncode, proc.stdout) == (0, "")
    # Partly reserved: the ports left out are counted and named.
    proc = _in_netns(CLEAR + "ray_ports_clear gpu001 20000 20319", "9000 65000", "20000-20299,20310")
    assert proc.returncode == 1
    assert "19 of them (20300-20319) are not in net.ipv4.ip_local_reserved_ports" in proc.stdout


def test_a_block_overlapping_the_range_edge_counts_only_the_overlap() -> None:
    proc = _in_netns(CLEAR + "ray_ports_clear gpu001 32700 32959", "32768 60999")
    assert proc.returncode == 1
    assert "192 of them (32768-32959)" in proc.stdout


@pytest.mark.parametrize("path", SCRIPTS)
def test_every_launch_path_refuses_to_start_ray_on_such_a_node(path: str) -> None:
    """`ray_start_args`, which every path calls before `ray start`, fails the node with the line."""
    script = SCRIPTS[path][0]
    program = functions(script, "log", "fail", "ray_port_block", "ray_ports_clear", "ray_start_args") + (
        "SLURMD_NODENAME=gpu007; ray_port_block 3; ray_start_args worker 10.0.0.5 /tmp/x 4 8 10.0.0.1; echo started"
    )
    stock = _in_netns(program, "32768 60999")
    assert stock.returncode == 0 and stock.stdout.strip() == "started", stock.stderr
    dgx = _in_netns(program, "9000 65000")
    assert dgx.returncode == 1 and "started" not in dgx.stdout
    (line,) = dgx.stderr.splitlines()
    assert "ERROR: Ray's ports " in line and "of node gpu007" in line and "9000-65000" in line, line


def test_the_slurm_job_ends_with_the_nodes_line() -> None:
    """A node that refused ends the Ray step; the job's outcome line is the node's reason."""
    script = SCRIPTS["sbatch"][0]
    log = (
        "grpo 10:00:00 [node2] ERROR: Ray's ports 20000-20255 overlap the ephemeral port range 9000-65000 of node "
        "node2 (net.ipv4.ip_local_port_range): ...\nsrun: error: node2: task 1: Exited with exit code 1\n"
    )
    program = functions(script, "log", "fail", "ray_step_failure") + (
        'ray_step_log=$(mktemp); printf "%s" "$LOG" >"$ray_step_log"; '
        'ray_step_failure "before the head\'s GCS answered"; echo not reached'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env={**os.environ, "LOG": log})
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].endswith(
        "ERROR: the Ray step ended on node2: Ray's ports 20000-20255 overlap the ephemeral port range 9000-65000 "
        "of node node2 (net.ipv4.ip_local_port_range): ..., before the head's GCS answered (see its lines above)"
    )
