"""The head is Ready only once its dashboard can take a submission: the rendered readiness probe, run as the
kubelet runs it, in a network namespace of its own where the agent's and the dashboard's ports answer as
a starting head's do."""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap

import pytest

from grpo_infra import k8s as render
from tests.k8s.conftest import K8S_STACKS, env_of
from tests.launchers.test_ephemeral_ports import pytestmark  # noqa: F401 (the same root-only gate)

# Stand-ins for the head's two HTTP servers: the agent (52365) and the dashboard (8265), each answering
# what Ray 2.60 answers (`/api/healthz`: 200 "raylet: success\ngcs: success", or 503 while the GCS is not
# up; `/api/gcs_healthz`: 200 "success"), or not listening at all ("closed").
SERVERS = textwrap.dedent(
    """
    import http.server, sys, threading
    def server(port, status, body):
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status); self.end_headers(); self.wfile.write(body)
            def log_message(self, *a): pass
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    for spec in sys.argv[1:]:
        port, state = spec.split("=")
        if state != "closed":
            body = b"raylet: success\\ngcs: success" if port == "52365" else b"success"
            bound = server(int(port), 200 if state == "up" else 503, body)
            threading.Thread(target=bound.serve_forever, daemon=True).start()
    print("listening", flush=True)
    threading.Event().wait()
    """
)


def _head_readiness(stack: str) -> list[str]:
    head = render.ray_job(env_of(stack))["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    probe = head["containers"][0]["readinessProbe"]
    assert probe["timeoutSeconds"] == 5
    command = probe["exec"]["command"]
    assert command[0] == "python3"
    return [sys.executable, *command[1:]]


def _ready(stack: str, agent: str, dashboard: str) -> bool:
    """Whether the probe passes with the agent and the dashboard in these states ("up", "503", "closed")."""
    servers = shlex.join([sys.executable, "-c", SERVERS, f"52365={agent}", f"8265={dashboard}"])
    program = (
        "ip link set lo up || exit 99\n"
        f"{servers} >ready.fifo 2>/dev/null & exec 3<ready.fifo; read -r -u 3 line\n"
        f"timeout 5 {shlex.join(_head_readiness(stack))}; status=$?; kill $!; exit $status\n"
    )
    proc = subprocess.run(
        ["unshare", "--net", "bash", "-c", f"cd $(mktemp -d) && mkfifo ready.fifo && {{ {program} }}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode not in (99, 124), proc.stderr
    return proc.returncode == 0


@pytest.mark.parametrize("stack", K8S_STACKS)
def test_a_head_whose_dashboard_does_not_answer_yet_is_not_ready(stack: str) -> None:
    assert _ready(stack, agent="up", dashboard="up")
    # KubeRay's own probe (the agent's /api/healthz alone) passes here; a submission would be refused.
    assert not _ready(stack, agent="up", dashboard="closed")
    assert not _ready(stack, agent="503", dashboard="up")
    assert not _ready(stack, agent="closed", dashboard="up")
