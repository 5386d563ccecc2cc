"""The debugger switch of a job: Ray's debugger and NCCL's log, the same on every target.

verl's multi-node guide names two Ray debuggers that exclude each other: the distributed debugger
(post-mortem through debugpy, `RAY_DEBUG_POST_MORTEM=1`, Ray >= 2.39) and the legacy one
(`RAY_DEBUG=legacy` with `ray start --ray-debugger-external`); its text says the legacy flags must be
removed before using the new debugger. The spec holds one value for both, so they cannot be combined,
and refuses `job.env` entries that would switch on the other one behind the spec's back.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import SpecModel

# NCCL_DEBUG_SUBSYS accepts a comma-separated list of subsystem names (INIT, COLL, P2P, SHM, NET, GRAPH,
# TUNING, ENV, ALLOC, CALL, PROXY, NVLS, BOOTSTRAP, REG, PROFILE, RAS, ALL), each optionally negated with ^.
NcclSubsys = Annotated[str, StringConstraints(pattern=r"^\^?[A-Z]+(,\^?[A-Z]+)*$")]
# Variables the debugger switch owns: setting them in `job.env` as well is refused.
DEBUG_ENV_KEYS = frozenset({"RAY_DEBUG", "RAY_DEBUG_POST_MORTEM", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"})


class Debug(SpecModel):
    """How the job can be debugged: Ray's debugger and NCCL's log (docs/debugging.md)."""

    ray_debugger: Literal["off", "postMortem", "legacy"] = Field(
        default="off",
        description="`postMortem`: Ray's distributed debugger (RAY_DEBUG_POST_MORTEM=1; the image must provide "
        "debugpy, nothing is installed at run time); `legacy`: RAY_DEBUG=legacy and `ray start "
        "--ray-debugger-external` on head and workers, which opens the debugger on each node's address.",
    )
    nccl_debug: Literal["WARN", "INFO", "TRACE"] | None = Field(
        default=None,
        description="NCCL_DEBUG for every process; each rank then writes its own NCCL_DEBUG_FILE under the "
        "job's log directory (nccl.<host>.<pid>.log).",
    )
    nccl_debug_subsys: NcclSubsys = Field(
        default="INIT,NET", description="NCCL_DEBUG_SUBSYS when `ncclDebug` is set: which subsystems log."
    )
