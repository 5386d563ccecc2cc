"""The stack's job on real nodes: Kueue admits the gang, KubeRay makes the RayCluster, the head and the
workers start in real containers (the stack's CPU image, loaded into every node) on the right nodes
with the device plugin's GPUs, Ray sees every worker and every GPU, the submitter runs the Slurm
sandbox's probe (placement of every rank, checkpointed steps on the nodes' shared host path), and the
RayJob ends SUCCEEDED with the probe's own exit status.

Two things of the rendered RayJob are swapped, and only these: the entrypoint (verl and the fabric
gate need GPUs and NCCL; the probe is what the Slurm sandbox runs in their place) and the image
guard's arguments (the CPU variant declares its own Python and no CUDA,
`grpo_infra.image.build.variant_guard_args`). Pods are sized from the pool, as rendered.

Needs root, the real-node packages, the built kubelet and `grpo-infra image build local-k8s`."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_infra.image.build import build, variant_guard_args
from grpo_infra.image.oci import OCIError
from grpo_infra.image.pods import CONTAINER_NAME as GUARD
from grpo_infra.k8s.raycluster import checkpoint_sub_path
from grpo_infra.kube import cluster, images, realnodes
from grpo_infra.kube.plan import CPU_NODE, Paths, pool_hosts
from tests.conftest import unavailable

from .conftest import ROOT, get, local_cluster, local_k8s, stack_objects, wait_until

pytestmark = pytest.mark.cluster

ENV = local_k8s()
POOL = ENV.pools[0]
STEPS = 3
TENANT = ENV.job.tenant


# The probe's file run as a script: `-m grpo_infra.probe` would import the sandbox package, whose
# cluster module needs the spec's dependencies (python-hostlist), which the CPU image does not hold.
RUN_PROBE = "import runpy, grpo_infra; runpy.run_path(grpo_infra.__path__[0] + '/probe.py', run_name='__main__')"


def probe_entrypoint() -> str:
    """The sandbox's probe against the RayJob's cluster: the gang's nodes and GPUs, the head apart."""
    return shlex.join(
        [
            "python3",
            "-c",
            RUN_PROBE,
            "--address",
            "auto",
            "--nodes",
            str(ENV.gang.nodes),
            "--gpus-per-node",
            str(POOL.gpu.per_node),
            "--head-apart",
            "--checkpoint-dir",
            ENV.job.checkpoint.dir,
            "--steps",
            str(STEPS),
            "--step-seconds",
            "1",
        ]
    )


def job_objects() -> list[dict[str, Any]]:
    objects = stack_objects(ENV)
    job = next(o for o in objects if o["kind"] == "RayJob")
    job["spec"]["entrypoint"] = probe_entrypoint()
    cluster_spec = job["spec"]["rayClusterSpec"]
    for group in [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]:
        for init in group["template"]["spec"]["initContainers"]:
            if init["name"] == GUARD:
                init["command"] = [*init["command"][:3], *variant_guard_args(ENV)]
    return objects


def host_paths() -> list[Path]:
    """The host directories the pods mount (the nodes see the host's files there): checkpoints, models, data."""
    volume = ENV.job.checkpoint.volume
    assert volume is not None and volume.host_path and volume.host_path_shared
    assert ENV.kubernetes is not None
    return [Path(volume.host_path), *(Path(v.host_path) for v in ENV.kubernetes.volumes if v.host_path)]


@pytest.fixture(scope="module")
def kube() -> Iterator[Paths]:
    realnodes_reason = realnodes.unavailable()
    if realnodes_reason:
        unavailable(realnodes_reason)
    # The stack's CPU image, as `grpo-infra image build local-k8s` makes it: cached by its contents, so
    # only a changed checkout rebuilds (the upper layer), and CI needs no step of its own.
    build(ENV, ROOT)
    try:
        archives = images.node_archives(ENV, ROOT, "local-k8s", operators=False)
    except OCIError as exc:
        unavailable(str(exc))
    made = [p for p in host_paths() if not p.exists()]
    checkpoints = host_paths()[0]
    if checkpoints.exists() and any(checkpoints.iterdir()):
        pytest.fail(f"{checkpoints} holds files of another run: remove them first")
    for path in made:
        path.mkdir(parents=True)
    try:
        with local_cluster(ENV, nodes="real", archives=archives) as paths:
            yield paths
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        if checkpoints.exists():
            for child in checkpoints.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()


def probe_events(log: str) -> list[dict[str, Any]]:
    return [json.loads(line.split("PROBE ", 1)[1]) for line in log.splitlines() if "PROBE {" in line]


def ray_pods(paths: Paths) -> list[dict[str, Any]]:
    return [p for p in get(paths, "pods", "-n", TENANT)["items"] if "ray.io/node-type" in p["metadata"]["labels"]]


def test_the_gang_runs_the_probe_on_real_pods_and_the_rayjob_succeeds(kube: Paths) -> None:
    created = time.time()
    assert cluster.apply(kube, job_objects()) == []
    job = wait_until(
        lambda: (j := get(kube, "rayjob", ENV.job.name, "-n", TENANT)).get("status", {}).get("rayClusterName") and j,
        120,
        "admitted by Kueue and a RayCluster made",
    )
    # Every Ray pod Running and Ready, in real containers, on the node the pool's rules pick.
    pods = wait_until(
        lambda: (
            (ps := ray_pods(kube))
            and len(ps) == ENV.gang.nodes + 1
            and all(
                any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                for p in ps
            )
            and ps
        ),
        600,
        "head and workers Ready",
    )
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    head = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    assert [p["spec"]["nodeName"] for p in head] == [CPU_NODE]
    # One worker per GPU node of the pool (its label selected, its taint tolerated), never two on one.
    assert len({p["spec"]["nodeName"] for p in workers}) == ENV.gang.nodes
    assert {p["spec"]["nodeName"] for p in workers} <= set(pool_hosts(POOL))
    for p in workers:
        statuses = p["status"]["containerStatuses"]
        assert all(s["containerID"].startswith("containerd://") for s in statuses)
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(POOL.gpu.per_node)
    # The job ends with the probe's own status.
    final = wait_until(
        lambda: (
            (j := get(kube, "rayjob", ENV.job.name, "-n", TENANT)).get("status", {}).get("jobStatus")
            in ("SUCCEEDED", "FAILED", "STOPPED")
            and j
        ),
        600,
        "the RayJob finished",
    )
    log = cluster.kubectl(kube, "logs", "-n", TENANT, f"job/{ENV.job.name}", timeout=60)
    assert final["status"]["jobStatus"] == "SUCCEEDED", log[-3000:]
    events = probe_events(log)
    by_kind = {e["event"]: e for e in events}
    # Ray saw every worker of the gang (the head apart) with every GPU the device plugin allocated.
    assert by_kind["nodes"]["count"] == ENV.gang.nodes
    assert all(n["gpus"] == POOL.gpu.per_node for n in by_kind["nodes"]["nodes"])
    worker_ips = {p["status"]["podIP"] for p in workers}
    assert {n["ip"] for n in by_kind["nodes"]["nodes"]} == worker_ips
    # One rank per worker pod (its hostname), each with its 8 GPUs.
    placement = by_kind["placement"]["bundles"]
    assert sorted(b["node"] for b in placement) == sorted(p["metadata"]["name"] for p in workers)
    assert all(len(b["gpu_ids"]) == POOL.gpu.per_node for b in placement)
    # Checkpointed steps 1..STEPS, on the host path every node shares.
    assert by_kind["start"]["from_step"] == 0
    # The submitter's `ray job logs --follow` may stop before the driver's last lines: the steps it shows
    # are 1, 2, ... in order, and the checkpoints on the host path every node shares hold all of them.
    logged = [e["step"] for e in events if e["event"] == "checkpoint"]
    assert logged and logged == list(range(1, len(logged) + 1)), log[-3000:]
    # The job's own directory on the shared volume (its subPath, so two jobs never share checkpoints).
    checkpoints = host_paths()[0] / checkpoint_sub_path(ENV)
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    for step in range(1, STEPS + 1):
        saved = json.loads((checkpoints / f"global_step_{step}" / "probe.json").read_text())
        assert saved["step"] == step
        assert sorted(b["node"] for b in saved["placement"]) == sorted(p["metadata"]["name"] for p in workers)
    timings = {
        "created": created,
        "admitted": job["metadata"]["creationTimestamp"],
        "ended": final["status"].get("endTime"),
    }
    print("job timings", timings)
