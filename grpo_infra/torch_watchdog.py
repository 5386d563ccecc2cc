"""The process-group timeout verl 0.9.1 leaves to torch, set in every Ray worker of the job.

Run by Ray in each worker process before it runs anything (Ray 2.60 `worker_process_setup_hook`:
ray/_private/workers/default_worker.py:314-318 imports and calls the hook named in the job's runtime
environment); verl's trainer passes it through `ray_kwargs.ray_init.runtime_env` (verl 0.9.1
trainer/main_ppo.py:62-72). It imports nothing of the project: the image carries this package's source,
not its dependencies.

Why a hook: verl 0.9.1 creates its process group with `timeout=None` (verl/workers/engine_workers.py:89,
verl/utils/distributed.py:83-100) and reads its own `actor_rollout_ref.nccl_timeout` nowhere, and torch has
no variable for the default. With no timeout torch takes `_get_default_timeout(backend)`
(torch/distributed/distributed_c10d.py:836-849, read at call time from the module's globals); verl's backend
string `cpu:gloo,cuda:nccl` is not `Backend.NCCL`, so that is `default_pg_timeout`, 30 min, rather than
NCCL's 10 (torch/distributed/constants.py). Setting both globals gives every process group the job's
timeout, which torch's NCCL watchdog enforces.
"""

from __future__ import annotations

import os
from datetime import timedelta

# Seconds a rank may wait in one collective; rendered on every path by grpo_infra.watchdog.
TIMEOUT_ENV = "GRPO_INFRA_COLLECTIVE_TIMEOUT_S"
HOOK = "grpo_infra.torch_watchdog.apply"


def apply() -> None:
    """Make the job's collective timeout torch's default for every process group this process creates."""
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return
    timeout = timedelta(seconds=int(text))
    try:
        from torch.distributed import distributed_c10d
    except ImportError:  # a worker of an image without torch (the probe's CPU image) has no collectives
        return
    distributed_c10d.default_pg_timeout = timeout
    distributed_c10d.default_pg_nccl_timeout = timeout
