"""The local Kubernetes, in numbers: the binaries' cold build times and disk size; with real nodes,
`kube up` to every node Ready (cold and warm), the memory of the whole cluster, `kube down`; with
KWOK nodes, `kube up`, `pulumi up` of local-k8s, RayJob created → admitted → RayCluster Ready,
`pulumi destroy`.

Build times are those recorded when each binary was built (scripts/build-kube.sh writes them to
`built.json`); a warm rebuild is free. Not a test: `python benchmarks/kube_bench.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from grpo_infra import engine
from grpo_infra.image.oci import OCIError
from grpo_infra.kube import cluster, images, realnodes
from grpo_infra.kube.plan import PULUMI_TOOLS, TOOLS, Paths
from grpo_infra.kube.plan import ROOT as KUBE_ROOT
from grpo_infra.kube.versions import cache_root
from grpo_infra.spec import load_stack

ROOT = Path(__file__).resolve().parents[1]


def du(path: Path) -> str:
    if not path.exists():
        return "absent"
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()[0]


def go_env(name: str) -> Path:
    return Path(subprocess.run(["go", "env", name], capture_output=True, text=True).stdout.strip())


def build_numbers() -> None:
    total = 0
    for name, tool in {**TOOLS, "kubelet": realnodes.KUBELET, **PULUMI_TOOLS}.items():
        record = tool.path.parent.parent / "built.json"
        if record.is_file():
            seconds = json.loads(record.read_text())["seconds"]
            total += seconds
            size = tool.path.stat().st_size / 2**20
            print(f"build  {name:<28} {tool.version:<10} {seconds:>5d}s  {size:6.0f} MiB")
        else:
            print(f"build  {name:<28} {tool.version:<10} not built")
    print(f"build  total (sequential sum)                   {total:>5d}s")
    print(
        f"disk   binaries {du(cache_root())}, Go module cache {du(go_env('GOMODCACHE'))}, "
        f"Go build cache {du(go_env('GOCACHE'))}"
    )


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cluster_rss_mib() -> float:
    """Resident memory of everything the cluster runs: processes naming its root (command line or
    environment: control plane, operators, DNS, every node's kubelet, containerd, shims, device
    plugin) and everything in the nodes' cgroups (the containers)."""
    pids = set(realnodes.cgroup_pids())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(KUBE_ROOT).encode() in cmdline or f"GRPO_KUBE_ROOT={KUBE_ROOT}".encode() in environ:
            pids.add(int(proc.name))
    total_kib = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total_kib += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total_kib / 1024


def real_node_numbers() -> None:
    """Real nodes: `kube up` twice (the first may compile the pause image), memory, `kube down`."""
    reason = realnodes.unavailable()
    if reason:
        print(f"real   not run: {reason}")
        return
    stack = "local-k8s"
    env = load_stack(stack, ROOT).environment
    for attempt in ("first", "warm"):
        started = time.monotonic()
        state = cluster.up(stack, env, nodes="real", timeout=300)
        took = time.monotonic() - started
        print(f"real   kube up to all {len(state['nodes'])} nodes Ready + GPUs advertised ({attempt})   {took:6.1f}s")
        time.sleep(10)
        print(f"real   memory of the whole cluster, idle                 {cluster_rss_mib():8.0f} MiB")
        started = time.monotonic()
        cluster.down()
        print(f"real   kube down (nothing left)                          {time.monotonic() - started:6.1f}s")


def job_numbers() -> None:
    """The stack's job on real nodes (the objects `grpo-infra up local-k8s` creates, unchanged: the probe
    as entrypoint, the CPU variant's guard): RayJob created → admitted → all Ray nodes joined →
    SUCCEEDED, and the peak memory of the whole cluster while it runs."""
    from tests.kube.test_job_real import ENV, host_paths, job_objects, probe_events

    reason = realnodes.unavailable()
    if reason:
        print(f"job    not run: {reason}")
        return
    try:
        archives = images.node_archives(ENV, ROOT, "local-k8s", operators=False)
    except OCIError as exc:
        print(f"job    not run: {exc}")
        return
    made = [p for p in host_paths() if not p.exists()]
    for path in made:
        path.mkdir(parents=True)
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(3):
            peak[0] = max(peak[0], cluster_rss_mib())

    try:
        started = time.monotonic()
        cluster.up("local-k8s", ENV, nodes="real", timeout=300, archives=archives)
        print(f"job    kube up, real nodes, job image loaded             {time.monotonic() - started:6.1f}s")
        paths = Paths(cluster.ROOT)
        threading.Thread(target=sample, daemon=True).start()
        cluster.apply(paths, job_objects())
        ns, name = ENV.job.tenant, ENV.job.name
        deadline, seen = time.monotonic() + 900, float("nan")
        while time.monotonic() < deadline:
            job = json.loads(cluster.kubectl(paths, "get", "rayjob", name, "-n", ns, "-o", "json"))
            if job.get("status", {}).get("jobStatus") in ("SUCCEEDED", "FAILED", "STOPPED"):
                seen = time.time()  # KubeRay sets status.endTime only once the deployment is Complete
                break
            time.sleep(2)
        log = cluster.kubectl(paths, "logs", "-n", ns, f"job/{name}", timeout=60)
        events = {e["event"]: e for e in probe_events(log)}
        workload = json.loads(cluster.kubectl(paths, "get", "workloads", "-n", ns, "-o", "json"))["items"][0]
        created = stamp(job["metadata"]["creationTimestamp"])
        admitted = next(
            stamp(c["lastTransitionTime"]) for c in workload["status"]["conditions"] if c["type"] == "Admitted"
        )
        joined = events["nodes"]["time"] if "nodes" in events else float("nan")
        ended = stamp(job["status"]["endTime"]) if job["status"].get("endTime") else seen
        print(
            f"job    RayJob created → admitted {admitted - created:.0f}s → all Ray nodes joined "
            f"{joined - admitted:.0f}s → {job['status'].get('jobStatus')} {ended - joined:.0f}s "
            f"(total {ended - created:.0f}s; API timestamps whole seconds, the end as polled every 2 s)"
        )
        for bundle in events.get("placement", {}).get("bundles", []):
            print(f"job    rank {bundle['bundle']} on {bundle['node']} GPUs {bundle['gpu_ids']}")
        stop.set()
        print(f"job    peak memory of the whole cluster with the job running {peak[0]:6.0f} MiB")
    finally:
        stop.set()
        cluster.down()
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        checkpoints = host_paths()[0]
        if checkpoints.exists():
            for child in checkpoints.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()


def charts_numbers() -> None:
    """The operators from their charts on real nodes (`kube up`'s default there): `grpo-infra up local-k8s`
    installing both Helm releases (their pods Ready, Kueue's webhook certificate mounted) and creating the
    stack's objects, then `grpo-infra destroy local-k8s` removing them with the charts."""
    reason = realnodes.unavailable()
    if reason:
        print(f"charts not run: {reason}")
        return
    env = load_stack("local-k8s", ROOT).environment
    cli = str(Path(sys.executable).parent / "grpo-infra")
    shell = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}

    def timed(command: str) -> float:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", f'eval "$({cli} kube env)" && {cli} {command}'], cwd=ROOT, env=shell, capture_output=True
        )
        if done.returncode != 0:
            raise SystemExit(f"charts `{command}` failed: {(done.stdout + done.stderr)[-2000:].decode()}")
        return time.monotonic() - started

    try:
        started = time.monotonic()
        cluster.up("local-k8s", env, nodes="real", timeout=300, operators="charts")
        print(f"charts kube up, real nodes, operator images loaded      {time.monotonic() - started:6.1f}s")
        print(f"charts grpo-infra up: both releases Ready + the stack    {timed('up local-k8s'):6.1f}s")
        print(f"charts grpo-infra destroy: the stack, then both charts   {timed('destroy local-k8s'):6.1f}s")
    finally:
        cluster.down()


def loss_numbers() -> None:
    """A node lost mid-run, for real (tests/kube/test_job_real.py's drills, which print one line each): the
    head's node rebooted after 45 s, the head's node dead and untouched, then a worker's node dead for good;
    each from the loss to the whole gang on a new Ray cluster and to SUCCEEDED after resuming. Two CPU
    nodes, as the tests run them: the submitter apart from its head."""
    import tempfile

    from tests.kube.test_job_real import CPU_NODES, ENV, host_paths, lose_a_node_mid_run

    reason = realnodes.unavailable()
    if reason:
        print(f"loss   not run: {reason}")
        return
    archives = images.node_archives(ENV, ROOT, "local-k8s", operators=False)
    made = [p for p in host_paths() if not p.exists()]
    for path in made:
        path.mkdir(parents=True)
    try:
        cluster.up("local-k8s", ENV, nodes="real", timeout=300, archives=archives, cpu_nodes=len(CPU_NODES))
        paths = Paths(cluster.ROOT)
        for role, then in (("head", "reboot"), ("head", "nothing"), ("worker", "out-of-service")):
            with tempfile.TemporaryDirectory() as scratch:
                lose_a_node_mid_run(paths, Path(scratch), role, then)
    finally:
        cluster.down()
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def cluster_numbers() -> None:
    stack = "local-k8s"
    env = load_stack(stack, ROOT).environment
    started = time.monotonic()
    cluster.up(stack, env, nodes="fake")
    print(f"kube   up to ready (KWOK: 4 GPU nodes + 1 CPU node, Kueue, KubeRay) {time.monotonic() - started:6.1f}s")
    paths = Paths(cluster.ROOT)
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", "bench")
    try:
        st = engine.select(stack, ROOT, cluster.engine_settings(stack))
        started = time.monotonic()
        engine.up(st)
        print(f"pulumi up of {stack} from nothing                          {time.monotonic() - started:6.1f}s")
        ns, name = env.job.tenant, env.job.name
        rc_name = ""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            job = json.loads(cluster.kubectl(paths, "get", "rayjob", name, "-n", ns, "-o", "json"))
            rc_name = job.get("status", {}).get("rayClusterName", "")
            if rc_name:
                rc = json.loads(cluster.kubectl(paths, "get", "raycluster", rc_name, "-n", ns, "-o", "json"))
                if rc.get("status", {}).get("state") == "ready":
                    break
            time.sleep(0.5)
        created = stamp(job["metadata"]["creationTimestamp"])
        workload = json.loads(cluster.kubectl(paths, "get", "workloads", "-n", ns, "-o", "json"))["items"][0]
        admitted = next(
            stamp(c["lastTransitionTime"]) for c in workload["status"]["conditions"] if c["type"] == "Admitted"
        )
        ready = next(
            stamp(c["lastTransitionTime"])
            for c in rc["status"].get("conditions", [])
            if c["type"] in ("Ready", "RayClusterProvisioned") and c["status"] == "True"
        )
        print(
            f"rayjob created → admitted {admitted - created:.0f}s → RayCluster ready {ready - admitted:.0f}s "
            "(API timestamps: whole seconds)"
        )
        started = time.monotonic()
        engine.destroy(st)
        print(f"pulumi destroy of {stack}                                  {time.monotonic() - started:6.1f}s")
    finally:
        cluster.down()


if __name__ == "__main__":
    # `kube_bench.py real` or `kube_bench.py fake`: only that half of the cluster's numbers;
    # `kube_bench.py job`: only the job on real nodes; `kube_bench.py loss`: the node-loss drills;
    # `kube_bench.py charts`: the operators installed from their charts and destroyed with the stack.
    only = sys.argv[1] if len(sys.argv) > 1 else None
    if only == "job":
        job_numbers()
        sys.exit(0)
    if only == "loss":
        loss_numbers()
        sys.exit(0)
    if only == "charts":
        charts_numbers()
        sys.exit(0)
    build_numbers()
    if only != "fake" and not [n for n, t in TOOLS.items() if not t.path.is_file()]:
        real_node_numbers()
    if only != "real" and not [n for n, t in {**TOOLS, **PULUMI_TOOLS}.items() if not t.path.is_file()]:
        cluster_numbers()
