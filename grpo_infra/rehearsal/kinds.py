"""Each kind of Ray object followed to the end its kind promises (docs/kubernetes.md, "Which kind").

- `rayjob`: the run ends SUCCEEDED (`job_wait.wait`, as `grpo-infra up --wait` follows it).
- `raycluster`: Kueue admits the RayCluster whole and it becomes ready; then the tenant does what the docs
  say, `grpo-infra submit STACK --wait` with its own kubeconfig, and the submission SUCCEEDS on it.
- `raycronjob`: the schedule runs every minute in a rehearsal (a substitution, plan.py); the first tick's
  RayJob is followed as a RayJob is, and that tick made exactly one run.

A gang that cannot go on is named in one line and released as `up --wait` does (job_wait.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .. import job_wait
from ..job_wait import Kubectl, Outcome, Say, WaitError
from ..kube import cluster
from ..kube.plan import Paths
from ..spec import Environment
from .tenant import identity

# KubeRay v1.6.2 ray-operator/apis/ray/v1/raycronjob_types.go: the RayJobs a RayCronJob makes carry its name
# in this label and their tick in this annotation.
CRON_LABEL = "ray.io/cronjob-name"
SCHEDULED_AT = "ray.io/cronjob-scheduled-timestamp"
# A tick comes within a minute of `up`; KubeRay then needs a few seconds to make its RayJob.
FIRST_TICK_S = 150
# KubeRay v1.6.2 ray-operator/apis/ray/v1/raycluster_types.go `Ready`: every pod of the cluster running.
READY = "ready"


def follow(
    env: Environment,
    kubectl: Kubectl,
    say: Say,
    work: Path,
    unschedulable_after: float,
    once_running: Callable[[str], None] | None = None,
) -> Outcome:
    """The stack's Ray object, by its kind, to its end (`work`: the rehearsal's project, for `submit`)."""
    common: dict[str, Any] = {
        "timeout": 1800,
        "unschedulable_after": unschedulable_after,
        "first_failure": True,
        "release": True,
        "mount_after": unschedulable_after,
    }
    if env.job.kind == "raycluster":
        ready(env, kubectl, say, unschedulable_after)
        if once_running is not None:
            once_running(env.job.name)
        return submitted(env, kubectl, say, work)
    if env.job.kind == "raycronjob":
        run = first_run(env, kubectl, say)
        outcome = job_wait.wait(env, kubectl, say, name=run, once_running=once_running, **common)
        one_run_per_tick(env, kubectl, run, say)
        return outcome
    return job_wait.wait(env, kubectl, say, once_running=once_running, **common)


def ready(env: Environment, kubectl: Kubectl, say: Say, unschedulable_after: float, timeout: float = 900) -> None:
    """Until the RayCluster is ready; a stuck pod, or a cluster Kueue has not admitted in
    `unschedulable_after`, raises WaitError in one line (and releases the gang, as `up --wait` does)."""
    ns, name = env.job.tenant, env.job.name
    started = time.monotonic()
    last = ""
    while True:
        ray = json.loads(kubectl("get", "raycluster", name, "-n", ns, "-o", "json"))
        state = str(ray.get("status", {}).get("state") or ("Suspended" if ray["spec"].get("suspend") else "New"))
        if state != last:
            say(f"raycluster {ns}/{name}: {state}")
            last = state
        if state == READY:
            return
        waited = time.monotonic() - started
        if state == "Suspended" and waited > unschedulable_after:
            raise WaitError(f"raycluster {ns}/{name}: {job_wait.not_admitted(kubectl, ns, ray, waited)}")
        pods = job_wait.ray_pods(kubectl, ns, name)
        found = job_wait.stuck_gang(kubectl, ns, pods, unschedulable_after, unschedulable_after)
        if found is not None:
            line = f"raycluster {ns}/{name}: {job_wait.stuck_line(kubectl, ns, found)}{job_wait.held(kubectl, ns, ray)}"
            raise WaitError(line + job_wait.deactivate(kubectl, ns, ray))
        if waited > timeout:
            raise WaitError(f"raycluster {ns}/{name} still {state} after {timeout:.0f}s")
        time.sleep(2)


def tenant_kubeconfig(paths: Paths, namespace: str, dest: Path) -> Path:
    """The local cluster's kubeconfig as the tenant (`as:` its ServiceAccount: impersonation by the
    administrator, as tenant.py's kubectl does), for a command the docs give the team."""
    config = yaml.safe_load(paths.kubeconfig.read_text())
    for user in config["users"]:
        user["user"]["as"] = identity(namespace)
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    dest.chmod(0o600)
    return dest


def submitted(env: Environment, kubectl: Kubectl, say: Say, work: Path) -> Outcome:
    """`grpo-infra submit STACK --wait`, as docs/kubernetes.md gives it to the team, with the tenant's own
    kubeconfig; its lines are said as they come. Raises WaitError with its last line when it fails."""
    ns, name = env.job.tenant, env.job.name
    paths = Paths(cluster.ROOT)
    config = tenant_kubeconfig(paths, ns, work / "tenant.kubeconfig")
    stack = env_stack(work)
    path = os.pathsep.join([str(Path(cluster.tool("kubectl")).parent), os.environ.get("PATH", "")])
    cli = str(Path(sys.executable).with_name("grpo-infra"))
    say(f"as the tenant: grpo-infra submit {stack} --wait")
    proc = subprocess.run(
        [cli, "submit", stack, "--root", str(work), "--kubeconfig", str(config), "--wait"],
        cwd=work,
        env={**os.environ, "PATH": path, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = (proc.stdout + proc.stderr).rstrip()
    for line in out.splitlines():
        say(line)
    if proc.returncode != 0:
        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
        raise WaitError(f"raycluster {ns}/{name}: grpo-infra submit, as the tenant, failed: {last.strip()}")
    status = "SUCCEEDED" if "SUCCEEDED" in out else "UNKNOWN"
    pods = job_wait.ray_pods(kubectl, ns, name)
    hosts = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    return Outcome(job={"kind": "RayCluster", "status": {"jobStatus": status}}, log="", hosts=hosts)


def env_stack(work: Path) -> str:
    """The one stack of the rehearsal's project (run.write_project)."""
    (stack,) = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (work / "stacks").glob("Pulumi.*.yaml")]
    return stack


def _runs(env: Environment, kubectl: Kubectl) -> list[dict[str, Any]]:
    ns = env.job.tenant
    out = kubectl("get", "rayjobs", "-n", ns, "-l", f"{CRON_LABEL}={env.job.name}", "-o", "json")
    return list(json.loads(out).get("items", []))


def first_run(env: Environment, kubectl: Kubectl, say: Say) -> str:
    """The name of the RayJob of the RayCronJob's first tick."""
    ns, name = env.job.tenant, env.job.name
    limit = time.monotonic() + FIRST_TICK_S
    while not (runs := _runs(env, kubectl)):
        if time.monotonic() > limit:
            raise WaitError(
                f"raycronjob {ns}/{name}: no run within {FIRST_TICK_S}s on an every-minute schedule "
                "(is KubeRay's RayCronJob feature gate on? docs/kubernetes.md)"
            )
        time.sleep(2)
    first = min(runs, key=lambda j: j["metadata"]["annotations"].get(SCHEDULED_AT, ""))
    say(
        f"raycronjob {ns}/{name}: tick {first['metadata']['annotations'].get(SCHEDULED_AT)}: rayjob {first['metadata']['name']}"
    )
    return str(first["metadata"]["name"])


def one_run_per_tick(env: Environment, kubectl: Kubectl, run: str, say: Say) -> None:
    """The followed run's tick made that one RayJob (KubeRay v1.6.2 may make two for a tick, kuberay#4849; the
    stack names each run by its tick, so a second is refused: docs/kubernetes.md "RayCronJob")."""
    ns, name = env.job.tenant, env.job.name
    runs = _runs(env, kubectl)
    tick = next(j["metadata"]["annotations"].get(SCHEDULED_AT) for j in runs if j["metadata"]["name"] == run)
    same = sorted(j["metadata"]["name"] for j in runs if j["metadata"]["annotations"].get(SCHEDULED_AT) == tick)
    if same != [run]:
        raise WaitError(f"raycronjob {ns}/{name}: the tick {tick} made {len(same)} runs: {', '.join(same)}")
    say(f"raycronjob {ns}/{name}: the tick {tick} made one run, {run}")
