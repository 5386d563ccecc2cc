"""Settings that turn a lost or wedged node into a failed attempt within minutes (docs/kubernetes.md,
"When a node is lost").

NCCL cannot take a new member mid-run, so a gang that lost a node must restart whole. Three timeouts
bound how long a dead rank can hold the others:

- Ray's GCS health checks: a node that stops answering is declared dead, its actors die, verl's driver
  fails, the RayJob fails and KubeRay starts a new Ray cluster (`backoffLimit`).
- The kubelet's liveness probe on every Ray container: a raylet that is alive but unhealthy (wedged)
  gets its container restarted, which Ray then sees as a dead node.
- Kueue's `waitForPodsReady.recoveryTimeout` (`grpo_infra.k8s.kueue_config`): when the retry's new
  Ray cluster cannot get ready (the lost node not replaced), the gang is evicted whole and requeued.

A lost head is the submitter's to see (`submitter_liveness`): KubeRay ends an attempt when the submitter
Job fails, and nothing else on a live node would notice that the head's node is gone.
"""

from __future__ import annotations

from typing import Any

from ..image import ray_version
from ..spec import Environment

# Every health check waits this long and the next starts this long after the previous.
HEALTH_CHECK_PERIOD_S = 5
# The dashboard agent's HTTP port; `dashboard-agent-listen-port` under host networking.
AGENT_PORT = 52365
DASHBOARD_PORT = 8265  # the head dashboard's HTTP port (Ray's default, `ray start --dashboard-port`)
# Ray 2.53 added the agent's unified `/api/healthz` (raylet, and the GCS on the head): Ray 2.60's
# ray/dashboard/modules/reporter/healthz_agent.py `unified_health`. KubeRay v1.7.0 probes it over HTTP from
# that version on, and with `wget` commands before it (ray-operator/controllers/ray/common/pod.go:727-811).
UNIFIED_HEALTH_RAY = (2, 53, 0)
# KubeRay v1.7.0's readiness defaults (ray-operator/controllers/ray/utils/constant.go:305-313), kept:
# a pod not ready for 50 s is reported, nothing is restarted for it.
READINESS = {"initialDelaySeconds": 10, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 10}
LIVENESS_INITIAL_DELAY_S = 30


def ray_health_env(env: Environment) -> list[tuple[str, str]]:
    """Ray system settings for the GCS's node health checks (`RAY_<name>` overrides Ray's config,
    src/ray/common/ray_config_def.h: `health_check_period_ms` 3000, `health_check_timeout_ms` 10000,
    `health_check_failure_threshold` 5). The GCS runs on the head; the workers get the same values so
    that every process of the cluster agrees."""
    assert env.kubernetes is not None
    detect = env.kubernetes.ray_job.node_loss.detect_seconds
    period_ms = str(HEALTH_CHECK_PERIOD_S * 1000)
    return [
        ("RAY_health_check_failure_threshold", str(detect // HEALTH_CHECK_PERIOD_S)),
        ("RAY_health_check_period_ms", period_ms),
        ("RAY_health_check_timeout_ms", period_ms),
    ]


def probes(env: Environment, head: bool, agent_port: int = AGENT_PORT) -> dict[str, Any]:
    """`livenessProbe` and `readinessProbe` of a Ray container.

    Rendered rather than left to KubeRay (which injects them only when absent) so that the liveness
    window comes from the spec: `livenessSeconds` of failures restart the container.
    """
    assert env.kubernetes is not None
    settings = env.kubernetes.ray_job
    timeout = 5 if head else 2  # KubeRay's: the head's check covers the GCS too
    liveness = {
        **_check(ray_version(env), head, agent_port, timeout),
        "initialDelaySeconds": LIVENESS_INITIAL_DELAY_S,
        "timeoutSeconds": timeout,
        "periodSeconds": HEALTH_CHECK_PERIOD_S,
        "successThreshold": 1,
        "failureThreshold": settings.node_loss.liveness_seconds // HEALTH_CHECK_PERIOD_S,
    }
    # A check of its own (not the liveness one's dict), so rendered YAML carries no anchors.
    ready = _head_ready(ray_version(env), timeout) if head else _check(ray_version(env), head, agent_port, timeout)
    readiness = {**ready, **READINESS, "timeoutSeconds": timeout}
    return {"livenessProbe": liveness, "readinessProbe": readiness}


def _head_ready(ray_version: str, timeout: int) -> dict[str, Any]:
    """The head's readiness: its node's health (the agent, as `_check`) and the dashboard's HTTP server.

    KubeRay v1.6.2 creates the K8sJobMode submitter once the RayCluster is `Ready` (every pod Ready,
    `rayjob_controller.go` Initializing), and the submitter runs `ray job submit` at once, with no wait of
    its own (`common/job.go` BuildJobSubmitCommand waits only in SidecarMode; kuberay#4760, fixed by #4798 in
    v1.7.0) and no retry inside `ray job submit`. From Ray 2.53 KubeRay probes the head on the agent's
    `/api/healthz` (port 52365, `common/pod.go` supportsUnifiedHealthCheck), which knows nothing of the
    dashboard (port 8265): the head turns Ready while the dashboard still starts, the submission is
    refused, the submitter Job fails (`backoffLimit: 0`) and the whole gang is retried as a new Ray
    cluster. The dashboard opens its HTTP server only after every module, the job API's too, is loaded
    (Ray 2.60 `dashboard/http_server_head.py`: "Http server should be initialized after all modules
    loaded"), and answers `/api/gcs_healthz` without a token; so the head is Ready only once both answer,
    as KubeRay probed heads before Ray 2.53."""
    agent = "/api/healthz" if _unified(ray_version) else "/api/local_raylet_healthz"
    urls = (f"http://localhost:{AGENT_PORT}{agent}", f"http://localhost:{DASHBOARD_PORT}/api/gcs_healthz")
    each = max(1, (timeout - 1) // len(urls))  # both requests inside the probe's own timeout
    check = (
        "import urllib.request as u; "
        f"exit(0 if all(b'success' in u.urlopen(a, timeout={each}).read() for a in {urls!r}) else 1)"
    )
    return {"exec": {"command": ["python3", "-c", check]}}


def _unified(ray_version: str) -> bool:
    return tuple(int(p) for p in ray_version.split(".")) >= UNIFIED_HEALTH_RAY


def submitter_liveness(env: Environment) -> dict[str, Any]:
    """The submitter's `livenessProbe`: the head's GCS, through its dashboard, as the GCS checks a worker.

    KubeRay v1.6.2 ends a K8sJobMode attempt on the submitter Job's `Failed` condition
    (`rayjob_controller.go` `checkK8sJobStatus`) and, while it runs, polls the dashboard and requeues on
    every error with no bound of its own. When the head's node dies, the submitter's `ray job logs
    --follow` waits on a connection that nothing resets; a submitter on that same node stays `Terminating`
    there, and its Job adds `Failed` only once no pod is terminating (k8s v1.36.3
    `pkg/controller/job/job_controller.go:1643`), so it never fails. A submitter on a live node that stops hearing the GCS for `detectSeconds` is killed by its
    kubelet, its pod fails (`restartPolicy: Never`, the Job's `backoffLimit: 0`), and KubeRay retries the
    attempt as a new Ray cluster. `/api/gcs_healthz` answers `success` while the GCS lives, and needs no
    token (Ray 2.60 `dashboard/http_server_head.py`, `public_exact_paths`); `RAY_DASHBOARD_ADDRESS` is set
    by KubeRay on the submitter (v1.6.2 `configureSubmitterContainer`, `host:port` without a scheme)."""
    assert env.kubernetes is not None
    detect = env.kubernetes.ray_job.node_loss.detect_seconds
    check = (
        "import os, urllib.request; a = os.environ['RAY_DASHBOARD_ADDRESS']; "
        "a = a if '://' in a else 'http://' + a; "
        f"r = urllib.request.urlopen(a + '/api/gcs_healthz', timeout={HEALTH_CHECK_PERIOD_S - 1}); "
        "exit(0 if b'success' in r.read() else 1)"
    )
    return {
        "exec": {"command": ["python3", "-c", check]},
        "periodSeconds": HEALTH_CHECK_PERIOD_S,
        "timeoutSeconds": HEALTH_CHECK_PERIOD_S,
        "successThreshold": 1,
        "failureThreshold": detect // HEALTH_CHECK_PERIOD_S,
    }


def _check(ray_version: str, head: bool, agent_port: int, timeout: int) -> dict[str, Any]:
    if _unified(ray_version):
        return {"httpGet": {"path": "/api/healthz", "port": agent_port}}
    commands = [
        f"wget --tries 1 -T {timeout} -q -O- http://localhost:{agent_port}/api/local_raylet_healthz | grep success"
    ]
    if head:
        commands.append(
            f"wget --tries 1 -T {timeout} -q -O- http://localhost:{DASHBOARD_PORT}/api/gcs_healthz | grep success"
        )
    return {"exec": {"command": ["bash", "-c", " && ".join(commands)]}}
