"""A Slurm stack's rehearsal, carried out: the sandbox built from the rehearsed stack's rendered files, its
sbatch submitted as a user would (the probe as `GRPO_ENTRYPOINT`), followed to its end, the sandbox torn down.

The sandbox's slurmctld and slurmds run the stack's own slurm.conf fragment and gres.conf; the job is the
rendered sbatch, unchanged (grpo_infra/rehearsal/slurm_plan.py says what the stack was changed to).
"""

from __future__ import annotations

import secrets
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import cluster as sandbox
from ..sandbox import jobs
from ..training import probe_command
from .plan import Rehearsal

Say = Callable[[str], None]
# A rehearsal's job never waits for another: it holds the sandbox alone. Ray's readiness on 2 cores, the
# probe's steps and the clean-up take about a minute; the budget leaves room for a requeue.
JOB_TIMEOUT_S = 600


@dataclass(frozen=True)
class SlurmOutcome:
    job_id: int
    state: str
    log: str

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED"


def entrypoint(rehearsal: Rehearsal) -> str:
    """The probe in verl's place, by this machine's Python (the image's stand-in), the head in the gang."""
    argv = [a for a in probe_command(rehearsal.env) if a != "--head-apart"]
    return shlex.join([sys.executable, *argv[1:]])


def run(rehearsal: Rehearsal, say: Say, *, keep: bool = False) -> SlurmOutcome:
    """Build the sandbox, submit the stack's sbatch, follow it to its end, then tear down (unless `keep`)."""
    env = rehearsal.env
    hosts = env.gang.pool.host_names
    say(f"sandbox: {len(hosts)} Slurm node(s) of pool {env.gang.pool.name}, real slurmctld and slurmd")
    plan = sandbox.up(rehearsal.stack, env, len(hosts))
    checkpoints = Path(env.job.checkpoint.dir)
    shutil.rmtree(checkpoints, ignore_errors=True)
    checkpoints.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix=f"grpo-rehearsal-{rehearsal.stack}-"))
    try:
        extra = {"GRPO_ENTRYPOINT": entrypoint(rehearsal)}
        extra |= {s.env: secrets.token_hex(16) for s in env.job.secrets}
        job = jobs.submit(plan.sbatch, extra_env=extra, cwd=work)
        say(f"sbatch {plan.sbatch}: job {job}")
        state = jobs.wait_for_state(job, timeout=JOB_TIMEOUT_S)
        say(f"job {job}: {state}")
        return SlurmOutcome(job, state, jobs.output(job))
    finally:
        if not keep:
            sandbox.down()
            shutil.rmtree(checkpoints, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
