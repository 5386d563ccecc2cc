"""Bring the local Slurm sandbox up and down: munge, slurmctld and one slurmd per network namespace.

Everything started is found again by name or pid file, so `down` (and `up`, which calls it first)
cleans up after a crash as well as after a clean run. Needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import synth
from ..localnode import add_bridge, attach, bringup, check_subnet_free, kill_namespace, teardown
from ..localnode import namespace_pids as namespace_pids
from ..localnode import namespaces as _namespaces
from ..localnode.bringup import BringUp
from ..localnode.run import LocalNodeError, run
from ..processes import wait_for
from ..slurmgen import SBATCH_PATH
from ..spec import Environment
from .plan import (
    BRIDGE,
    LINK_PREFIX,
    NAMESPACE_PREFIX,
    ROOT,
    Node,
    Plan,
    SandboxError,
    base_slurm_conf,
    device_paths,
    hosts_block,
    make_plan,
    sandbox_fragment,
    strip_hosts_block,
)

HOSTS = Path(os.environ.get("GRPO_SANDBOX_HOSTS_FILE", "/etc/hosts"))
# Binaries the sandbox runs, and the Debian package that ships each.
TOOLS = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
    "munged": "munge",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "runuser": "util-linux",
}
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


def which(tool: str) -> str | None:
    """A tool's path, looking in the sbin directories too (root's PATH may lack them)."""
    found = shutil.which(tool)
    if found:
        return found
    return next((f"{d}/{tool}" for d in _SBIN if os.access(f"{d}/{tool}", os.X_OK)), None)


def missing_packages() -> list[str]:
    """Debian packages whose binaries the sandbox needs and cannot find."""
    return sorted({pkg for tool, pkg in TOOLS.items() if which(tool) is None})


def require_root_and_tools() -> None:
    if os.geteuid() != 0:
        raise SandboxError("the sandbox creates network namespaces and starts Slurm daemons: run it as root")
    missing = missing_packages()
    if missing:
        raise SandboxError(
            f"missing packages: {' '.join(missing)}. Install them with: "
            f"apt-get update && apt-get install -y --no-install-recommends {' '.join(missing)} "
            "(or run scripts/install-system-deps.sh)"
        )


def _run(cmd: Sequence[str], *, check: bool = True, env: dict[str, str] | None = None, timeout: float = 30) -> str:
    """The local-node layer's runner, its one-line failure raised as the sandbox's own error."""
    try:
        return run(cmd, check=check, env=env, timeout=timeout)
    except LocalNodeError as exc:
        raise SandboxError(str(exc)) from None


def slurm_env(root: Path = ROOT) -> dict[str, str]:
    """The environment in which plain Slurm commands talk to the sandbox."""
    return {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf"), "GRPO_RAY_TMPDIR": str(root / "tmp")}


# ---------------------------------------------------------------------------------------------- up


def up(
    stack: str,
    env: Environment,
    nodes: int,
    *,
    root: Path = ROOT,
    timeout: float = 60,
    files: dict[str, str] | None = None,
    keep_on_failure: bool = False,
) -> Plan:
    """Build the sandbox for `stack` with `nodes` nodes and wait until every node is idle in Slurm: named steps
    (grpo_infra/localnode/bringup.py), the failing one named, its logs copied out, then torn down unless
    `keep_on_failure`.

    `files` defaults to the stack's rendered files (`synth.render` of the sandbox's view of it).
    """
    require_root_and_tools()
    down(root)
    plan = make_plan(stack, env, nodes, root=root)
    try:
        check_subnet_free(plan.subnet, "pick another private /24 with GRPO_SANDBOX_SUBNET=10.x.y.0/24")
    except LocalNodeError as exc:
        raise SandboxError(f"sandbox {exc}") from None
    files = synth.render(plan.env) if files is None else files
    for needed in ("slurm/slurm.conf", "slurm/gres.conf", SBATCH_PATH):
        if needed not in files:
            raise SandboxError(f"stack {stack} renders no {needed}; the sandbox runs the rendered Slurm files")
    bring = BringUp("sandbox", root, lambda: down(root), SandboxError, keep=keep_on_failure)
    with bring.step("files"):
        created = _write_files(plan, files)
        _write_state(plan, created)
        _add_hosts_block(plan)
    with bring.step("munge"):
        _start_munge(plan)
    with bring.step("network"):
        _build_network(plan)
    with bring.step("slurmctld"):
        _start_controller(plan)
    with bring.step("slurmd"):
        for node in plan.nodes:
            start_node(node.name, root=root)
        wait_for_nodes(plan, timeout=timeout)
    _write_state(plan, created, steps=bring.seconds)
    return plan


def _write_files(plan: Plan, files: dict[str, str]) -> list[str]:
    """Config, rendered tree, state dirs and placeholder GPUs; returns paths created outside the root."""
    created: list[str] = []
    dirs = (plan.etc, plan.ray_tmp, plan.ctl_dir / "state", *(plan.node_dir(n.name) / "spool" for n in plan.nodes))
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
    synth.write_tree(files, plan.stack_dir)
    fragment = plan.etc / "stack-slurm.conf"
    text, dropped = sandbox_fragment(files["slurm/slurm.conf"])
    if dropped:
        text = f"# The sandbox has no slurmdbd: it left out {' '.join(dropped)}\n" + text
    fragment.write_text(text, encoding="utf-8")
    (plan.etc / "gres.conf").write_text(files["slurm/gres.conf"], encoding="utf-8")
    if "slurm/topology.conf" in files:
        (plan.etc / "topology.conf").write_text(files["slurm/topology.conf"], encoding="utf-8")
    plan.slurm_conf.write_text(base_slurm_conf(plan, fragment), encoding="utf-8")
    assert plan.env.job is not None
    outside: list[Path] = [Path(plan.env.job.checkpoint.dir)]
    for device in device_paths(plan.env):
        outside.append(device)
    for path in outside:
        top = _first_missing_parent(path)
        if top is not None and not top.is_relative_to(plan.root):
            created.append(str(top))
    Path(plan.env.job.checkpoint.dir).mkdir(parents=True, exist_ok=True)
    for device in device_paths(plan.env):
        device.parent.mkdir(parents=True, exist_ok=True)
        if not device.exists():
            # A character device (the null device's numbers): slurmd accepts it as a GPU file.
            os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return created


def _first_missing_parent(path: Path) -> Path | None:
    """The topmost directory (or the file itself) that creating `path` would add; None if it exists."""
    if path.exists():
        return None
    top = path
    while not top.parent.exists():
        top = top.parent
    return top


def _write_state(plan: Plan, created: list[str], steps: dict[str, float] | None = None) -> None:
    state = {
        "stack": plan.stack,
        "subnet": str(plan.subnet),
        "interface": plan.interface,
        "controller": {"name": plan.controller.name, "address": plan.controller.address},
        "nodes": [{"name": n.name, "address": n.address, "namespace": n.namespace} for n in plan.nodes],
        "gpus_per_node": plan.env.gang.gpus_per_node,
        "sbatch": str(plan.sbatch),
        "checkpoint_dir": plan.env.job.checkpoint.dir,
        "created_outside_root": created,
        # Each bring-up step's seconds (grpo_infra/localnode/bringup.py), once every step is done.
        **({"steps": steps} if steps else {}),
    }
    plan.state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def load_state(root: Path = ROOT) -> dict[str, object]:
    """What `up` recorded; raises SandboxError when no sandbox is up."""
    try:
        return json.loads((root / "sandbox.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SandboxError("no sandbox is up; start one with `grpo-infra sandbox up`") from None


def _add_hosts_block(plan: Plan) -> None:
    text = strip_hosts_block(HOSTS.read_text(encoding="utf-8"))
    if text and not text.endswith("\n"):
        text += "\n"
    # Written in place: /etc/hosts is often a bind mount that cannot be replaced by rename.
    HOSTS.write_text(text + hosts_block(plan), encoding="utf-8")


def _start_munge(plan: Plan) -> None:
    """munged with a fresh key of the sandbox's own, on its own socket (the machine's munge is untouched)."""
    d = plan.munge_dir
    d.mkdir(parents=True, exist_ok=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    shutil.chown(d, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    d.chmod(0o755)
    key.chmod(0o400)
    with open(d / "munged.out", "w") as out:
        subprocess.run(
            [
                which("runuser") or "runuser",
                "-u",
                "munge",
                "--",
                which("munged") or "munged",
                f"--key-file={key}",
                f"--socket={plan.munge_socket}",
                f"--pid-file={d / 'munged.pid'}",
                f"--log-file={d / 'munged.log'}",
                f"--seed-file={d / 'munged.seed'}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=30,
        )
    _wait(lambda: plan.munge_socket.exists(), 10, f"munged did not start; see {d / 'munged.log'}")


def _build_network(plan: Plan) -> None:
    """A bridge on this machine, and per node a namespace joined to it by a veth pair."""
    add_bridge(BRIDGE, plan.bridge_address, plan.subnet.prefixlen)
    for node in (plan.controller, *plan.nodes):
        attach(BRIDGE, node.link(plan.interface))


def _in_node(namespace: str, hostname: str, command: str) -> list[str]:
    """Run `command` in a namespace's network with its own hostname.

    nsenter, not `ip netns exec`: the latter remounts /sys, and slurmd then fails to find cgroups.
    """
    return [
        which("nsenter") or "nsenter",
        f"--net=/run/netns/{namespace}",
        which("unshare") or "unshare",
        "--uts",
        "sh",
        "-c",
        f"hostname {hostname} && exec {command}",
    ]


def _start_controller(plan: Plan) -> None:
    ctl = plan.controller
    cmd = _in_node(ctl.namespace, ctl.name, f"{which('slurmctld')} -c -f {plan.slurm_conf}")
    with open(plan.ctl_dir / "slurmctld.out", "w") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=30)
    env = slurm_env(plan.root)
    _wait(
        lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).stdout.count("UP") > 0,
        20,
        f"slurmctld did not answer; see {plan.ctl_dir / 'slurmctld.log'}",
    )


def start_node(name: str, *, root: Path = ROOT) -> None:
    """Start (or restart) one node's slurmd in its namespace."""
    conf = root / "etc" / "slurm.conf"
    node_dir = root / "nodes" / name
    (node_dir / "spool").mkdir(parents=True, exist_ok=True)
    cmd = _in_node(Node.namespace_of(name), name, f"{which('slurmd')} -f {conf} -N {name}")
    with open(node_dir / "slurmd.out", "a") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=30)


def kill_node(name: str, root: Path = ROOT) -> list[int]:
    """Kill every process on one node (its slurmd, job steps and Ray), as if the machine died."""
    _node_of(name, root)
    return kill_namespace(Node.namespace_of(name))


def boot_node(name: str, root: Path = ROOT) -> None:
    """A killed node comes back as a rebooted machine: its slurmd starts again and registers (its job steps
    and Ray do not come back; Slurm decides what happens to the job it was running)."""
    _node_of(name, root)
    if namespace_pids(Node.namespace_of(name)):
        raise SandboxError(f"node {name} is running: kill it first (`grpo-infra sandbox kill-node {name}`)")
    start_node(name, root=root)


def _node_of(name: str, root: Path) -> None:
    """Refuses a name that is not a node of the running sandbox, naming the ones that are."""
    nodes = [str(n["name"]) for n in load_state(root)["nodes"]]  # type: ignore[attr-defined]
    if name not in nodes:
        raise SandboxError(f"no node {name!r} in the sandbox; its nodes: {', '.join(nodes)}")


def node_states(root: Path = ROOT) -> dict[str, str]:
    """Each node's state as Slurm reports it (idle, alloc, down*, ...)."""
    out = _run(["sinfo", "-h", "-N", "-o", "%N %t"], env=slurm_env(root), check=False)
    states: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def wait_for_nodes(plan: Plan, *, timeout: float = 60) -> None:
    """Until every node is idle (registered, not drained): the cluster is ready for jobs."""
    names = {n.name for n in plan.nodes}

    def ready() -> bool:
        states = node_states(plan.root)
        return all(states.get(n) == "idle" for n in names)

    try:
        _wait(ready, timeout, "")
    except SandboxError:
        raise SandboxError(
            f"nodes not idle after {timeout:.0f}s: {node_states(plan.root)}; "
            f"see {plan.root}/nodes/<node>/slurmd.log and {plan.ctl_dir / 'slurmctld.log'}"
        ) from None


def _wait(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    wait_for(predicate, timeout, SandboxError(message))


# -------------------------------------------------------------------------------------------- down


def namespaces() -> list[str]:
    """The sandbox's network namespaces that exist now."""
    return _namespaces(NAMESPACE_PREFIX)


def down(root: Path = ROOT) -> list[str]:
    """Stop everything the sandbox started and remove everything it added; safe to run any time."""
    created: list[str] = []
    with contextlib.suppress(SandboxError, ValueError, TypeError):
        created = list(load_state(root).get("created_outside_root", []))  # type: ignore[call-overload]
    done: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        text = HOSTS.read_text(encoding="utf-8")
        stripped = strip_hosts_block(text)
        if stripped != text:
            HOSTS.write_text(stripped, encoding="utf-8")
            done.append(f"removed the sandbox block from {HOSTS}")
    daemons = [root / "ctl" / "slurmctld.pid", *sorted(root.glob("nodes/*/slurmd.pid")), root / "munge" / "munged.pid"]
    return done + teardown(
        root, pidfiles=daemons, namespace_prefix=NAMESPACE_PREFIX, link_prefix=LINK_PREFIX, created=created
    )


# ------------------------------------------------------------------------------------ status / env


def status(root: Path = ROOT) -> str:
    """`sinfo` of the sandbox, one line per node, and where its bring-up's time went."""
    state = load_state(root)
    steps = state.get("steps") or {}
    took = ", ".join(f"{name} {seconds}s" for name, seconds in steps.items())  # type: ignore[union-attr]
    text = _run(["sinfo", "-N", "-l"], env=slurm_env(root), check=False)
    return text + (f"bring-up: {took}\n" if took else "")


def export_logs(dest: Path, root: Path = ROOT) -> list[Path]:
    """Copy the sandbox's logs (slurmctld's, each slurmd's, munge's, each job's Ray start-up) to `dest`."""
    load_state(root)
    return bringup.export_logs(root, dest)


def env_exports(root: Path = ROOT) -> str:
    """Shell lines that point plain Slurm commands at the sandbox (for `eval`)."""
    state = load_state(root)
    lines = [
        f"export SLURM_CONF={root / 'etc' / 'slurm.conf'}",
        # The rendered sbatch puts each job's Ray temp dirs here; `down` removes them with the sandbox.
        f"export GRPO_RAY_TMPDIR={root / 'tmp'}",
    ]
    # Jobs inherit the submitting shell's PATH: put this interpreter's bin (with `ray`) first.
    bindir = Path(sys.executable).parent
    if (bindir / "ray").exists() and str(bindir) not in os.environ.get("PATH", "").split(":"):
        lines.append(f'export PATH={bindir}:"$PATH"')
    lines.append(f"# sandbox of stack {state['stack']}: submit with `sbatch {state['sbatch']}`")
    return "\n".join(lines)
