"""The debugger switch (`job.debug`) as environment and `ray start` options: one rule for every target.

Facts from verl's multi-node guide (docs/debugging.md cites it) and Ray 2.60:
- Ray's distributed debugger: `RAY_DEBUG_POST_MORTEM=1` in the environment of Ray's workers; it
  attaches through debugpy, which must be importable there. The legacy flags must not be set with it.
- The legacy debugger: `RAY_DEBUG=legacy` and `ray start ... --ray-debugger-external` on the head and
  on every worker (`ray start --help`: "Make the Ray debugger available externally to the node. This is
  only safe to activate if the node is behind a firewall."), then `ray debug` on the head.
- NCCL: `NCCL_DEBUG` (WARN, INFO, TRACE), `NCCL_DEBUG_SUBSYS`, and `NCCL_DEBUG_FILE`, in which NCCL
  replaces `%h` with the host name and `%p` with the process id: one file per rank.
"""

from __future__ import annotations

from .spec import Environment

LEGACY_FLAG = "--ray-debugger-external"
LEGACY_WARNING = (
    "job.debug.rayDebugger is legacy: Ray's debugger listens on this node's address "
    "(--ray-debugger-external); anyone who reaches the node can attach to a paused task"
)
# Ray's debugpy integration refuses debugpy older than 1.8.0 (ray/util/debugpy.py, _try_import_debugpy,
# Ray 2.60): the check every target runs before Ray starts, with the image's python3.
DEBUGPY_CHECK = """python3 -c 'import debugpy, sys; sys.exit(debugpy.__version__ < "1.8.0")'"""
# One file per rank under the job's log directory: NCCL substitutes %h (host) and %p (pid).
NCCL_DEBUG_FILE_NAME = "nccl.%h.%p.log"


def debug_env(env: Environment, log_dir: str) -> list[tuple[str, str]]:
    """Variables the switch sets on every Ray node (and so in every Ray worker), in a stable order.

    `log_dir` is the job's log directory as the target writes it (a path, or a shell expression
    the target's script expands on each node).
    """
    debug = env.job.debug
    out: list[tuple[str, str]] = []
    if debug.ray_debugger == "postMortem":
        out.append(("RAY_DEBUG_POST_MORTEM", "1"))
    elif debug.ray_debugger == "legacy":
        out.append(("RAY_DEBUG", "legacy"))
    if debug.nccl_debug is not None:
        out += [
            ("NCCL_DEBUG", debug.nccl_debug),
            ("NCCL_DEBUG_SUBSYS", debug.nccl_debug_subsys),
            ("NCCL_DEBUG_FILE", f"{log_dir.rstrip('/')}/{NCCL_DEBUG_FILE_NAME}"),
        ]
    return out


def ray_start_args(env: Environment) -> list[str]:
    """Extra `ray start` options for the head and every worker."""
    return [LEGACY_FLAG] if env.job.debug.ray_debugger == "legacy" else []


def needs_debugpy(env: Environment) -> bool:
    """The distributed debugger attaches through debugpy: the image must provide it."""
    return env.job.debug.ray_debugger == "postMortem"


def warning(env: Environment) -> str | None:
    """The line every target prints when the switch opens a port to the node's network."""
    return LEGACY_WARNING if env.job.debug.ray_debugger == "legacy" else None


def ray_start_params(env: Environment) -> dict[str, str]:
    """The same options as KubeRay `rayStartParams`: a "true" value becomes the bare flag
    (ray-operator/controllers/ray/common/pod.go, convertParamMap)."""
    return {flag.removeprefix("--"): "true" for flag in ray_start_args(env)}


def debugpy_guard(env: Environment) -> str | None:
    """A POSIX sh line that stops the job with one message when the image lacks debugpy >= 1.8.0
    (Kubernetes: the entrypoint's first step on the head, whose image the workers share)."""
    if not needs_debugpy(env):
        return None
    message = "grpo: ERROR: job.debug.rayDebugger is postMortem, but the image has no debugpy >= 1.8.0"
    return f"{{ {DEBUGPY_CHECK} 2>/dev/null || {{ echo '{message}' >&2; exit 1; }}; }}"
