"""torch's NCCL watchdog, set from the stack on every path (`job.collectiveTimeoutMinutes`).

A rank blocked in a collective (a peer lost, a fabric fault) is aborted by torch's watchdog once the
process group's timeout passes; nothing else frees a survivor whose peer vanished without an error. Every
path gives the job's processes the same variables (the Kubernetes GPU workers, the sbatch, the launchers)
and verl the same overrides, from one timeout:

- `TORCH_NCCL_ASYNC_ERROR_HANDLING=3`: on a timeout or an NCCL error the watchdog tears the process down
  (without `ncclCommAbort`, which can itself hang on a dead peer). 3 is torch's default; stated so an
  image's own setting cannot leave it at 0, which only logs (`job.env` still has the last word).
- `TORCH_NCCL_ENABLE_MONITORING=1`, `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`: a monitor thread kills the process
  when the watchdog thread itself stops beating (stuck in a CUDA or NCCL call) for that long. The watchdog
  beats whatever the collectives' length, so this is torch's default 480 s, or the collective timeout when
  that is shorter: a stuck watchdog never outlives the bound it enforces.
  (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp: `TORCH_NCCL_ASYNC_ERROR_HANDLING`, `ErrorHandlingMode`,
  `TORCH_NCCL_ENABLE_MONITORING`, `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`; read in torch 2.13, installed beside
  verl here, while the images install verl 0.9.1's pin, torch 2.11.)
- the timeout itself (`grpo_infra.torch_watchdog`): verl 0.9.1 passes torch none, so each Ray worker
  sets torch's default through Ray's worker setup hook, when the image carries this project's modules
  (`image.contents.grpoInfra`); verl's own `actor_rollout_ref.nccl_timeout` gets the same value
  (verl 0.9.1 trainer/config/ppo_trainer.yaml:62-63, read by none of its code).
"""

from __future__ import annotations

from .spec import Environment
from .torch_watchdog import HOOK, TIMEOUT_ENV

NCCL_TIMEOUT_KEY = "actor_rollout_ref.nccl_timeout"
# Ray's runtime_env field (Ray 2.60 ray/runtime_env/runtime_env.py); verl's `ray_init.runtime_env` holds
# only `py_executable`, so the key is added with Hydra's `+`.
SETUP_HOOK_KEY = "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
# torch's ErrorHandlingMode SkipCleanUp: tear the process down without aborting the communicator.
TEAR_DOWN = "3"
# torch's default TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
# `HeartbeatMonitor::HeartbeatMonitor`: `getCvarInt(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, 60 * 8)`).
TORCH_HEARTBEAT_S = 480


def timeout_seconds(env: Environment) -> int:
    """The job's collective timeout, in seconds."""
    return env.job.collective_timeout_minutes * 60


def watchdog_env(env: Environment) -> list[tuple[str, str]]:
    """The variables every process of the job gets, in a stable order."""
    seconds = timeout_seconds(env)
    return [
        ("TORCH_NCCL_ASYNC_ERROR_HANDLING", TEAR_DOWN),
        ("TORCH_NCCL_ENABLE_MONITORING", "1"),
        ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(min(seconds, TORCH_HEARTBEAT_S))),
        (TIMEOUT_ENV, str(seconds)),
    ]


def watchdog_overrides(env: Environment) -> list[tuple[str, int | str]]:
    """What verl gets: its own timeout key, and the setup hook when the image can import it."""
    pairs: list[tuple[str, int | str]] = [(NCCL_TIMEOUT_KEY, timeout_seconds(env))]
    if env.image.contents.grpo_infra:
        pairs.append((SETUP_HOOK_KEY, HOOK))
    return pairs
