"""Slurm renderers: spec → slurm.conf / gres.conf / topology.conf fragments and the sbatch script.

Values are computed here; the Jinja2 templates in `grpo_infra/slurmgen/templates/` (package data)
only lay them out, so each template reads like the file it produces.
"""

from __future__ import annotations

from ..spec import Environment
from .accounting import ACCOUNTING_PATH, accounting_script
from .conf import gres_conf, slurm_conf, topology_conf
from .sbatch import sbatch

__all__ = [
    "ACCOUNTING_PATH",
    "SBATCH_PATH",
    "accounting_script",
    "gres_conf",
    "render_files",
    "sbatch",
    "slurm_conf",
    "topology_conf",
]

SBATCH_PATH = "slurm/grpo.sbatch"


def render_files(env: Environment) -> dict[str, str]:
    """`slurm/<file>` for every Slurm file of the stack (topology.conf only with switches, accounting.sh only with slurmdbd)."""
    files = {
        "slurm/slurm.conf": slurm_conf(env),
        "slurm/gres.conf": gres_conf(env),
        SBATCH_PATH: sbatch(env),
    }
    if env.slurm is not None and env.slurm.accounting == "slurmdbd":
        files[ACCOUNTING_PATH] = accounting_script(env)
    topology = topology_conf(env)
    if topology is not None:
        files["slurm/topology.conf"] = topology
    return dict(sorted(files.items()))
