"""Bring the local Kubernetes up and down: etcd, the API server, scheduler and controller manager,
Kueue and KubeRay as processes, and the stack's nodes: real ones (a kubelet and a containerd each,
in namespaces of their own, `realnodes.py`) where this machine allows, or KWOK faking them.

Every process is started with its pid recorded under the cluster's root and is found again by that
pid file (and only if its command line names the root), so `down` (and `up`, which calls it first)
cleans up after a crash as well as after a clean run. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..engine import Settings
from ..image.oci import OCIError
from ..k8s.operators import KUBERAY_NAMESPACE, KUEUE_NAMESPACE
from ..localnode import bringup, teardown
from ..localnode.bringup import BringUp
from ..processes import pid_of, wait_for
from ..spec import Environment, load_stack
from . import images, netpolicy, nodeimages, operator_images, realnodes
from .certs import FRONT_PROXY_CLIENT, Pki, write_pki
from .nodes import LINK_PREFIX, NAMESPACE_PREFIX, bridge_address, real_nodes
from .plan import (
    KUEUE_METRICS_CERTS,
    LOOPBACK,
    MANAGED_BY,
    POD_CIDR,
    PORTS,
    PULUMI_TOOLS,
    ROOT,
    SERVICE_CIDR,
    TOOLS,
    KubeError,
    Paths,
    cpu_node_names,
    crds,
    fake_nodes,
    kubeconfig,
    kueue_config,
    kwok_stages,
    require_tools,
    server_url,
    webhook_configurations,
)

# Start order; `down` stops in reverse so controllers go before the API server they talk to.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "dnsmasq",
    "dnsfeed",
    "kueue",
    "ray-operator",
)
OPERATOR_PROCESSES = ("kueue", "ray-operator")
NODE_MODES = ("auto", "real", "fake")
# Where Kueue and KubeRay run: host processes started by `up`, or pods of their Helm releases (`grpo-infra up`);
# `auto`: the charts on real nodes, as on a cloud, and processes with KWOK nodes (which start no pod).
OPERATOR_MODES = ("auto", "processes", "charts")


def tool(name: str) -> str:
    return str({**TOOLS, **PULUMI_TOOLS}[name].path)


def run_kubectl(
    paths: Paths, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """kubectl against the local cluster; a failure is a KubeError with kubectl's own message."""
    # A discovery cache of its own per call: kubectl otherwise keeps the API list from before the
    # CRDs existed (in ~/.kube/cache, shared across clusters at the same address) and refuses new kinds.
    with tempfile.TemporaryDirectory(prefix="kubectl-cache-", dir=paths.root) as cache:
        proc = subprocess.run(
            [tool("kubectl"), f"--kubeconfig={paths.kubeconfig}", f"--cache-dir={cache}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if check and proc.returncode != 0:
        raise KubeError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def kubectl(paths: Paths, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> str:
    return run_kubectl(paths, *args, stdin=stdin, check=check, timeout=timeout).stdout


def apply(paths: Paths, objects: Sequence[dict[str, Any]], validate: str = "strict") -> list[str]:
    """Server-side apply, as Pulumi's provider does: the API server validates against the real
    schemas and refuses a field a schema does not declare. Returns the API server's warnings."""
    text = yaml.safe_dump_all(list(objects), sort_keys=False)
    proc = run_kubectl(
        paths,
        "apply",
        "--server-side",
        "--field-manager=grpo-infra-kube",
        f"--validate={validate}",
        "-f",
        "-",
        stdin=text,
    )
    return [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("Warning:")]


# --------------------------------------------------------------------------------------- processes


def _start(paths: Paths, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    with open(paths.logs / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            cwd=paths.root,
        )
    paths.pidfile(name).write_text(f"{proc.pid}\n")
    # Right after the fork /proc/<pid>/cmdline may not show the program's arguments yet, and `_alive`
    # (which looks for the cluster's root there) would report a process that is starting as dead.
    deadline = time.monotonic() + 2
    while proc.poll() is None and not _alive(paths, name) and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(paths: Paths, name: str) -> bool:
    return pid_of(paths.pidfile(name), str(paths.root)) is not None


def _gone(paths: Paths, name: str) -> bool:
    """Dead on two looks half a second apart: while a wrapper execs its program, /proc/<pid>
    can briefly show neither the old nor the new command line, and one such read is no death."""
    if _alive(paths, name):
        return False
    time.sleep(0.5)
    return not _alive(paths, name)


def _wait(paths: Paths, name: str, ready: Callable[[], bool], timeout: float) -> None:
    """Until `ready()`; a process that died or never got ready is named with the tail of its log."""

    def check() -> bool:
        if _gone(paths, name):
            raise KubeError(f"{name} exited: {_log_tail(paths, name)}")
        return ready()

    try:
        wait_for(check, timeout, TimeoutError())
    except TimeoutError:
        # The log's tail as it is at the timeout, not as it was when the wait began.
        raise KubeError(f"{name} not ready after {timeout:.0f}s: {_log_tail(paths, name)}") from None


def _log_tail(paths: Paths, name: str, lines: int = 3) -> str:
    with contextlib.suppress(OSError):
        text = (paths.logs / f"{name}.log").read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) + f" (log: {paths.logs / f'{name}.log'})"
    return f"(no log at {paths.logs / f'{name}.log'})"


def _https_ok(url: str, pki: Pki) -> bool:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.crt("admin")), str(pki.key("admin")))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def _ports_free() -> None:
    busy = [f"{name} ({port})" for name, port in PORTS.items() if _listening(port)]
    if busy:
        raise KubeError(f"ports in use on {LOOPBACK}: {', '.join(busy)}; is another local cluster up?")


# ---------------------------------------------------------------------------------------------- up


def node_mode(requested: str = "auto") -> tuple[str, str | None]:
    """The node mode to run and, when `auto` falls back to fake nodes, the one line saying why.
    `real` on a machine that cannot run real nodes is refused with that line."""
    if requested not in NODE_MODES:
        raise KubeError(f"--nodes must be one of {', '.join(NODE_MODES)}, not {requested!r}")
    if requested == "fake":
        return "fake", None
    reason = realnodes.unavailable()
    if reason is None:
        return "real", None
    if requested == "real":
        raise KubeError(reason)
    return "fake", reason


def operator_mode(requested: str, nodes: str, why_fake: str | None = None) -> str:
    """Where the operators run on a cluster of `nodes` (`real` or `fake`): the charts need nodes that start pods."""
    if requested not in OPERATOR_MODES:
        raise KubeError(f"operators must be one of {', '.join(OPERATOR_MODES)}, not {requested!r}")
    if requested == "auto":
        return "charts" if nodes == "real" else "processes"
    if requested == "charts" and nodes != "real":
        because = why_fake or "--nodes fake"
        raise KubeError(
            f"the operators' charts need real nodes (KWOK nodes start no pod), and these would be fake: {because}"
        )
    return requested


def up(
    stack: str,
    env: Environment,
    *,
    root: Path = ROOT,
    timeout: float = 120,
    nodes: str = "auto",
    archives: list[Path] | None = None,
    cpu_nodes: int = 1,
    operators: str = "processes",
    keep_on_failure: bool = False,
) -> dict[str, Any]:
    """Start the cluster for `stack` and wait until its nodes are Ready (and, as processes, both operators serve),
    in named steps (grpo_infra/localnode/bringup.py): the failing one named, the logs copied out, then torn down
    unless `keep_on_failure`.
    `nodes`: `real` (kubelets and containers), `fake` (KWOK), or `auto` (real where possible).
    `operators`: `processes` (Kueue and KubeRay on the host, their CRDs applied here), `charts` (real nodes
    only: nothing of theirs yet; `grpo-infra up` installs both from the stack's Helm charts, as on a cloud),
    or `auto` (`charts` on real nodes, else `processes`).
    `archives`: the images real nodes get besides the pause image (default: the stack's job image
    if it is built, `images.node_archives`, and with `charts` the operators' images).
    `cpu_nodes`: untainted nodes for heads and submitters; with two, a submitter outlives its head's node."""
    if env.target != "kubernetes":
        raise KubeError(f"the local Kubernetes runs Kubernetes stacks; stack {stack}'s target is {env.target}")
    cpu_node_names(cpu_nodes)  # refused before anything is torn down
    mode, why_fake = node_mode(nodes)
    operators = operator_mode(operators, mode, why_fake)
    require_tools()
    down(root)
    _ports_free()
    paths = Paths(root)
    started = time.monotonic()
    bring = BringUp("kube", root, lambda: down(root), KubeError, keep=keep_on_failure)
    state = _bring_up(stack, env, paths, timeout, mode, archives, cpu_nodes, operators, bring)
    if why_fake:
        state["fake_because"] = why_fake
    state["steps"] = bring.seconds
    state["seconds"] = round(time.monotonic() - started, 1)
    paths.state.write_text(json.dumps(state, indent=2) + "\n")
    return state


def _bring_up(
    stack: str,
    env: Environment,
    paths: Paths,
    timeout: float,
    mode: str,
    archives: list[Path] | None,
    cpu_nodes: int,
    operators: str,
    bring: BringUp,
) -> dict[str, Any]:
    with bring.step("files"):
        state = _files(stack, env, paths, mode, cpu_nodes, operators)
    planned = real_nodes(env, cpu_nodes=cpu_nodes) if mode == "real" else []
    pki = Pki(paths.pki)
    created_outside: list[str] = state["created_outside_root"]
    if planned:
        # The network first: the API server's forward and the DNS server bind the bridge.
        with bring.step("network"):
            realnodes.wrap(lambda: realnodes.build_network(planned))
            realnodes.wrap(realnodes.forward_apiserver)
    with bring.step("control plane"):
        _start_control_plane(paths, pki, timeout)
    if operators == "processes":
        # Namespaces the operators and tests expect, then the CRDs (established before any CR is made); from
        # their charts instead, `grpo-infra up` makes both (a chart's CRDs must not exist before its release).
        with bring.step("CRDs"):
            apply(paths, [_namespace(KUEUE_NAMESPACE), _namespace(KUBERAY_NAMESPACE)])
            # validate=false: the API server still checks the CRDs; kubectl skips fetching the OpenAPI
            # document, which is slow to build while these large CRDs are being added.
            apply(paths, crds(pki.ca.read_bytes()), validate="false")
            kubectl(paths, "wait", "--for=condition=Established", "crd", "--all", f"--timeout={int(timeout)}s")

    if planned:
        notes: list[str] = []
        with bring.step("images"):
            if archives is None and operators == "charts":
                archives = [*operator_images.ensure_all(), *_job_archive(env, stack, notes)]
        # NetworkPolicy is enforced where the operators run as pods, as on a cloud: a policy cannot name an
        # operator that runs as a process of this machine, so the host-process operators would be cut off.
        enforce = operators == "charts"
        with bring.step("real nodes"):
            names = _start_real_nodes(stack, env, paths, planned, created_outside, timeout, archives, notes, enforce)
        if enforce:
            state["network_policy"] = netpolicy.version()
        if notes:
            state["images_note"] = notes[0]
        paths.state.write_text(json.dumps(state) + "\n")
    else:
        with bring.step("KWOK nodes"):
            _start_kwok(paths)
            fakes = fake_nodes(env, cpu_nodes)
            apply(paths, fakes)
            names = [n["metadata"]["name"] for n in fakes]
    if operators == "processes":
        with bring.step("Kueue"):
            _start_kueue(paths, pki, env, created_outside, timeout)
            paths.state.write_text(json.dumps(state) + "\n")
        with bring.step("KubeRay"):
            _start_kuberay(paths, timeout, dns=bridge_address() if planned else None)
    with bring.step("nodes Ready"):
        kubectl(paths, "wait", "--for=condition=Ready", *[f"node/{n}" for n in names], f"--timeout={int(timeout)}s")
        if planned:
            kubectl(paths, "label", "node", "--overwrite", *names, *[f"{k}={v}" for k, v in MANAGED_BY.items()])
            _wait_devices(paths, planned, timeout)
    state["nodes"] = names
    return state


def _files(stack: str, env: Environment, paths: Paths, mode: str, cpu_nodes: int, operators: str) -> dict[str, Any]:
    """The cluster's root: its certificates, kubeconfig, Pulumi passphrase and first state."""
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.config("x").parent.mkdir(parents=True, exist_ok=True)
    planned = real_nodes(env, cpu_nodes=cpu_nodes) if mode == "real" else []
    write_pki(
        paths.pki,
        ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
        [LOOPBACK, "10.96.0.1", *([bridge_address()] if planned else [])],
        kubelets=tuple(n.name for n in planned),
    )
    paths.kubeconfig.write_text(kubeconfig(paths))
    paths.kubeconfig.chmod(0o600)
    # The local backend's secrets are encrypted with a passphrase of this cluster's own: the state
    # lives and dies with the cluster, so `kube env` hands it out and nobody has to invent one.
    passphrase = paths.root / "pulumi-passphrase"
    passphrase.touch(mode=0o600)
    passphrase.write_text(secrets.token_urlsafe(24))
    created_outside: list[str] = []
    state: dict[str, Any] = {
        "stack": stack,
        "nodes_mode": mode,
        "cpu_nodes": cpu_nodes,
        "operators": operators,
        "created_outside_root": created_outside,
    }
    paths.state.write_text(json.dumps(state) + "\n")
    return state


def load(root: Path = ROOT, archives: list[Path] | None = None) -> list[Path]:
    """Import image archives into every real node of the running cluster (default: the job's image
    of its stack, once `grpo-infra image build STACK` has made it); returns what was loaded."""
    state = load_state(root)
    if state.get("nodes_mode") != "real":
        raise KubeError("the local cluster runs KWOK nodes: nothing runs images there")
    paths = Paths(root)
    if archives is None:
        env = load_stack(state["stack"], realnodes.PROJECT).environment
        try:
            archives = images.node_archives(env, realnodes.PROJECT, state["stack"], operators=False)
        except OCIError as exc:
            raise KubeError(str(exc)) from None
    realnodes.load_all_images(real_nodes_of(state), paths, archives, timeout=60)
    return archives


def real_nodes_of(state: dict[str, Any]) -> list[Any]:
    """The real nodes a running cluster was made with (from its stack, as `up` planned them)."""
    env = load_stack(state["stack"], realnodes.PROJECT).environment
    planned = real_nodes(env, cpu_nodes=state.get("cpu_nodes", 1))
    return [n for n in planned if n.name in state.get("nodes", [])]


def kill_node(name: str, root: Path = ROOT) -> list[int]:
    """A real node of the running cluster dies as a machine does: kubelet, containerd, its device
    plugin and every container at once (SIGKILL). Its disks stay (`boot_node` starts it again)."""
    _real_node(name, root)
    return realnodes.kill_node(name)


def boot_node(name: str, root: Path = ROOT) -> None:
    """A killed node comes back as a rebooted machine: the same disks (containerd's images, the kubelet's
    state, its pods' directories), fresh processes; the kubelet then reports what it finds of its pods."""
    node = _real_node(name, root)
    if realnodes.node_pids(name):
        raise KubeError(f"node {name} is running: kill it first (`grpo-infra kube kill-node {name}`)")
    realnodes.start_node(node, Paths(root))


def _real_node(name: str, root: Path) -> Any:
    state = load_state(root)
    if state.get("nodes_mode") != "real":
        raise KubeError("the local cluster runs KWOK nodes: only real nodes can be killed and booted")
    found = next((n for n in real_nodes_of(state) if n.name == name), None)
    if found is None:
        raise KubeError(f"no node {name} in the local cluster; its nodes: {' '.join(state.get('nodes', []))}")
    return found


def _wait_devices(paths: Paths, planned: list[Any], timeout: float) -> None:
    """Until every node's allocatable shows the devices its device plugin advertises: a node is
    Ready before its plugin has registered, and a gang admitted then would not fit."""

    def advertised() -> bool:
        nodes = {n["metadata"]["name"]: n for n in json.loads(kubectl(paths, "get", "nodes", "-o", "json"))["items"]}
        return all(
            nodes.get(node.name, {}).get("status", {}).get("allocatable", {}).get(resource) == str(count)
            for node in planned
            for resource, count in node.devices.items()
        )

    wait_for(advertised, timeout, KubeError(f"device plugins not registered after {timeout:.0f}s; see nodes/*/logs/"))


def _start_real_nodes(
    stack: str,
    env: Environment,
    paths: Paths,
    planned: list[Any],
    created: list[str],
    timeout: float,
    archives: list[Path] | None,
    note: list[str],
    enforce_policies: bool = False,
) -> list[str]:
    """The cluster DNS, then every node (booted at once), its images loaded; returns their names
    (and appends to `note` what could not be loaded). `enforce_policies`: each node runs the
    NetworkPolicy agent."""
    (paths.root / "dns").mkdir(parents=True, exist_ok=True)
    _start(paths, "dnsmasq", realnodes.dns_argv(paths))
    _start(paths, "dnsfeed", realnodes.dnsfeed_argv(paths), env=realnodes.node_env(paths.root))
    if archives is None:
        archives = _job_archive(env, stack, note)
    archives = [nodeimages.pause_archive(), *archives]
    token = None
    if enforce_policies:
        # The agent's RBAC and a token of its ServiceAccount, before any node boots (netpolicy.py).
        apply(paths, netpolicy.rbac())
        token = kubectl(paths, *netpolicy.token_request())
    for node in planned:
        realnodes.prepare_node(node, paths, created, token)
    paths.state.write_text(json.dumps({**load_state(paths.root), "created_outside_root": created}) + "\n")
    realnodes.seed_disks(planned, paths, archives)
    for node in planned:
        realnodes.start_node(node, paths)
    realnodes.load_all_images(planned, paths, archives, timeout)
    return [n.name for n in planned]


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(MANAGED_BY)}}


def _start_control_plane(paths: Paths, pki: Pki, timeout: float) -> None:
    client = f"http://{LOOPBACK}:{PORTS['etcd-client']}"
    _start(
        paths,
        "etcd",
        [
            tool("etcd"),
            "--name=grpo-local",
            f"--data-dir={paths.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls=http://{LOOPBACK}:{PORTS['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://{LOOPBACK}:{PORTS['etcd-peer']}",
            f"--initial-cluster=grpo-local=http://{LOOPBACK}:{PORTS['etcd-peer']}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync",  # a throwaway test cluster: speed over durability
        ],
    )
    _wait(paths, "etcd", lambda: _http_ok(f"{client}/health"), timeout)
    kc = str(paths.kubeconfig)
    # Flags after controller-runtime's envtest (pkg/internal/testing/controlplane/apiserver.go) plus
    # what real controllers need: service-account signing and RBAC.
    _start(
        paths,
        "kube-apiserver",
        [
            tool("kube-apiserver"),
            f"--etcd-servers={client}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={PORTS['apiserver']}",
            f"--cert-dir={paths.pki}",
            f"--tls-cert-file={pki.crt('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--authorization-mode=RBAC",
            # For logs and exec: the API server calls the kubelets as admin.
            f"--kubelet-client-certificate={pki.crt('admin')}",
            f"--kubelet-client-key={pki.key('admin')}",
            # By address: a node's name resolves nowhere (and must not be looked up off this machine).
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            "--profiling=false",
            # Webhooks and aggregated APIs served by pods (the operators from their charts): the API server
            # calls a Service's ready endpoint by its pod address, as no kube-proxy routes a ClusterIP here,
            # and proxies to an aggregated API as the front proxy, whose user the extension server trusts.
            "--enable-aggregator-routing=true",
            f"--proxy-client-cert-file={pki.crt(FRONT_PROXY_CLIENT)}",
            f"--proxy-client-key-file={pki.key(FRONT_PROXY_CLIENT)}",
            f"--requestheader-client-ca-file={pki.ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ],
    )
    _wait(paths, "kube-apiserver", lambda: _https_ok(f"{server_url()}/readyz", pki), timeout)
    common = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"]
    common += ["--leader-elect=false", f"--bind-address={LOOPBACK}", "--profiling=false"]
    _start(
        paths,
        "kube-controller-manager",
        [
            tool("kube-controller-manager"),
            *common,
            f"--secure-port={PORTS['controller-manager']}",
            f"--cert-dir={paths.config('controller-manager-certs')}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca}",
            f"--cluster-signing-cert-file={pki.ca}",
            f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--use-service-account-credentials=false",
        ],
    )
    _start(
        paths,
        "kube-scheduler",
        [
            tool("kube-scheduler"),
            *common,
            f"--secure-port={PORTS['scheduler']}",
            f"--cert-dir={paths.config('scheduler-certs')}",
        ],
    )
    _wait(paths, "kube-controller-manager", lambda: _listening(PORTS["controller-manager"]), timeout)
    _wait(paths, "kube-scheduler", lambda: _listening(PORTS["scheduler"]), timeout)


def _start_kwok(paths: Paths) -> None:
    stages = paths.config("kwok-stages.yaml")
    stages.write_text(kwok_stages())
    _start(
        paths,
        "kwok",
        [
            tool("kwok"),
            f"--kubeconfig={paths.kubeconfig}",
            f"--config={stages}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}",
            f"--node-ip={LOOPBACK}",
            f"--server-address={LOOPBACK}:{PORTS['kwok']}",
        ],
    )


def _start_kueue(paths: Paths, pki: Pki, env: Environment, created_outside: list[str], timeout: float) -> None:
    certs = paths.config("kueue-certs")
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki.crt("webhook"), certs / "tls.crt")
    shutil.copyfile(pki.key("webhook"), certs / "tls.key")
    _install_metrics_certs(pki, created_outside)
    config = paths.config("kueue.yaml")
    config.write_text(yaml.safe_dump(kueue_config(env, paths), sort_keys=False))
    _start(
        paths,
        "kueue",
        [
            tool("kueue"),
            f"--config={config}",
            # Its on-demand visibility API server binds every interface; not needed here.
            "--feature-gates=VisibilityOnDemand=false",
        ],
        env={"KUBECONFIG": str(paths.kubeconfig)},
    )
    _wait(paths, "kueue", lambda: _http_ok(f"http://{LOOPBACK}:{PORTS['kueue-health']}/readyz"), timeout)
    _wait(paths, "kueue", lambda: _listening(PORTS["kueue-webhook"]), timeout)
    manifests = (TOOLS["kueue"].path.parent.parent / "data/config/components/webhook/manifests.yaml").read_text()
    apply(paths, webhook_configurations(manifests, pki.ca.read_bytes()))


def _install_metrics_certs(pki: Pki, created_outside: list[str]) -> None:
    """Kueue insists on a metrics certificate at a fixed path; put ours there unless one exists."""
    crt, key = KUEUE_METRICS_CERTS / "tls.crt", KUEUE_METRICS_CERTS / "tls.key"
    if crt.exists() and key.exists():
        return
    top = KUEUE_METRICS_CERTS
    while not top.parent.exists():
        top = top.parent
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        raise KubeError(
            f"Kueue reads its metrics certificate from {KUEUE_METRICS_CERTS} and cannot be told "
            f"otherwise: create that directory writable by you (sudo install -d -o $USER {KUEUE_METRICS_CERTS})"
        ) from None
    if not top.exists() or top != KUEUE_METRICS_CERTS or not any(top.iterdir()):
        created_outside.append(str(top))
    shutil.copyfile(pki.crt("webhook"), crt)
    shutil.copyfile(pki.key("webhook"), key)
    if str(top) not in created_outside:
        created_outside += [str(crt), str(key)]


def _cluster_resolver(paths: Paths, argv: list[str], dns: str | None) -> list[str]:
    """`argv` in a mount namespace of its own whose /etc/resolv.conf names only the cluster DNS
    (real nodes) or 127.0.0.1 (fake nodes).

    KubeRay reaches a RayCluster's dashboard by its head Service's DNS name (ray-operator v1.6.2
    controllers/ray/utils/util.go:937-939, FetchHeadServiceURL). With real nodes the cluster DNS
    on the bridge answers it; with fake ones nothing resolves it, and through the machine's own
    resolver those lookups would leave the machine: pointed at loopback, where nothing answers,
    they fail at once and stay on this host. Needs root (a mount namespace); otherwise `argv` is
    unchanged. The host's named network namespaces are unmounted in the copy, so this process
    never keeps a deleted one alive.
    """
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return argv
    conf = paths.config("resolv.conf")
    if dns:
        conf.write_text(f"nameserver {dns}\nsearch cluster.local\noptions timeout:1 attempts:2\n")
    else:
        conf.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    bind = 'umount -l /run/netns 2>/dev/null; mount --bind "$0" /etc/resolv.conf && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, str(conf), *argv]


def _job_archive(env: Environment, stack: str, note: list[str]) -> list[Path]:
    """The stack's job image if it is built (else nothing, and `note` says so)."""
    try:
        return images.node_archives(env, realnodes.PROJECT, stack, operators=False)
    except OCIError as exc:
        note.append(f"the job's image is not loaded into the nodes: {exc}")
        return []


def _start_kuberay(paths: Paths, timeout: float, dns: str | None = None) -> None:
    _start(
        paths,
        "ray-operator",
        _cluster_resolver(
            paths,
            [
                tool("ray-operator"),
                "-enable-leader-election=false",
                f"-health-probe-bind-address={LOOPBACK}:{PORTS['kuberay-health']}",
                "-metrics-addr=0",
                "-log-stdout-encoder=console",
                # Alpha and off by default at v1.6.2 (pkg/features/features.go); stacks of `job.kind: raycronjob`
                # turn it on in the chart (grpo_infra.k8s.operators), the local cluster always.
                "-feature-gates=RayCronJob=true",
            ],
            dns,
        ),
        env={"KUBECONFIG": str(paths.kubeconfig)},
    )
    _wait(paths, "ray-operator", lambda: _http_ok(f"http://{LOOPBACK}:{PORTS['kuberay-health']}/readyz"), timeout)


# -------------------------------------------------------------------------------------------- down


def load_state(root: Path = ROOT) -> dict[str, Any]:
    try:
        return json.loads(Paths(root).state.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        raise KubeError("no local cluster is up; start one with `grpo-infra kube up`") from None


def down(root: Path = ROOT) -> list[str]:
    """Stop every process the cluster started (its nodes' containers included) and remove
    everything it made, inside its root and out; safe to run any time."""
    paths = Paths(root)
    created: list[str] = []
    with contextlib.suppress(KubeError):
        created = list(load_state(root).get("created_outside_root", []))
    # The nodes first (they would only report themselves lost), then the control plane.
    done = realnodes.kill_nodes()

    def host_state() -> list[str]:
        return realnodes.remove_forward() + realnodes.remove_cgroups()

    done += teardown(
        root,
        pidfiles=[paths.pidfile(name) for name in reversed(COMPONENTS)],
        namespace_prefix=NAMESPACE_PREFIX,
        link_prefix=LINK_PREFIX,
        created=created,
        before_links=host_state,
        grace=5,
    )
    return done + _ports_released()


def _ports_released(timeout: float = 20) -> list[str]:
    """Wait until the control plane's ports close, so a `kube up` right after `down` finds them free
    (a killed process's listening sockets go with it, a moment later); one line if some stay open."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [f"{name} ({port})" for name, port in PORTS.items() if _listening(port)]
        if not busy:
            return []
        time.sleep(0.2)
    return [f"still listening after {timeout:.0f} s on {LOOPBACK}: {', '.join(busy)} (not this cluster's?)"]


# ------------------------------------------------------------------------------------ status / env


def status(root: Path = ROOT) -> str:
    """Each component's process and the nodes as the API server sees them."""
    state = load_state(root)
    paths = Paths(root)
    mode = state.get("nodes_mode", "fake")
    lines = [
        f"local cluster of stack {state['stack']} at {server_url()} (up in {state.get('seconds', '?')}s), "
        f"{mode} nodes" + (f" ({state['fake_because']})" if state.get("fake_because") else "")
    ]
    if state.get("steps"):
        lines.append("  bring-up: " + ", ".join(f"{name} {seconds}s" for name, seconds in state["steps"].items()))
    charts = state.get("operators") == "charts"
    if charts:
        lines.append(
            f"  operators: from their charts, as pods in {KUEUE_NAMESPACE} and {KUBERAY_NAMESPACE} (`grpo-infra up`)"
        )
    lines.append(
        f"  NetworkPolicy: enforced on every node by {state['network_policy']}"
        if state.get("network_policy")
        else "  NetworkPolicy: not enforced (operators as processes of this machine, or KWOK nodes)"
    )
    for name in COMPONENTS:
        if (name == "kwok") != (mode == "fake") and name in ("kwok", "dnsmasq", "dnsfeed"):
            continue
        if charts and name in OPERATOR_PROCESSES:
            continue
        pid = pid_of(paths.pidfile(name), str(root))
        lines.append(f"  {name:<24} {'running, pid ' + str(pid) if pid else 'NOT RUNNING'}")
    lines.append(kubectl(paths, "get", "nodes", "-o", "wide", check=False).rstrip())
    pods = kubectl(paths, "get", "pods", "-A", "-o", "wide", check=False).rstrip()
    lines.append(pods or "no pods")
    jobs = kubectl(paths, "get", "rayjobs", "-A", check=False).rstrip()
    lines.append(jobs or "no RayJobs")
    return "\n".join(lines)


def export_logs(dest: Path, root: Path = ROOT) -> list[Path]:
    """Copy the cluster's logs to `dest`: its control plane's and operators', and each real node's (kubelet,
    containerd, device plugin, NetworkPolicy agent, boot)."""
    load_state(root)
    return bringup.export_logs(root, dest)


def env_exports(root: Path = ROOT) -> str:
    """Shell lines that point kubectl and pulumi at the local cluster (for `eval`)."""
    state = load_state(root)
    paths = Paths(root)
    bins = sorted({str(Path(tool(n)).parent) for n in ("kubectl", *PULUMI_TOOLS) if Path(tool(n)).is_file()})
    return "\n".join(
        [
            f"export KUBECONFIG={paths.kubeconfig}",
            # kubectl's discovery cache for this cluster only (it goes with `down`).
            f"export KUBECACHEDIR={paths.root / 'kubectl-cache'}",
            f'export PATH={":".join(bins)}:"$PATH"',
            # Pulumi offline: state in a local backend, no update check, plugins only from PATH.
            f"export PULUMI_HOME={paths.pulumi_home}",
            f"export PULUMI_BACKEND_URL=file://{paths.pulumi_state}",
            "export PULUMI_SKIP_UPDATE_CHECK=true",
            f"export PULUMI_CONFIG_PASSPHRASE_FILE={paths.root / 'pulumi-passphrase'}",
            "export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true",
            f"# local cluster of stack {state['stack']}: kubectl get nodes",
        ]
    )


def engine_settings(stack: str, root: Path = ROOT) -> Settings:
    """The Pulumi engine pointed at the local cluster: its kubeconfig, a file backend under the
    cluster's root, and the operators: those the cluster runs as processes, or the charts the stack installs."""
    state = load_state(root)
    require_tools(PULUMI_TOOLS)
    paths = Paths(root)
    return Settings(
        pulumi=Path(tool("pulumi")),
        provider_dir=Path(tool("pulumi-resource-kubernetes")).parent,
        backend_url=f"file://{paths.pulumi_state}",
        pulumi_home=paths.pulumi_home,
        work_dir=paths.root / "pulumi-work" / stack,
        kubeconfig=paths.kubeconfig,
        operators_installed=state.get("operators", "processes") == "processes",
    )
