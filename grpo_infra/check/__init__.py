"""Static gang feasibility: would this stack's job ever be admitted, and would verl accept it?

`synth`, `check` and the Pulumi program all call `violations(env)`, so an infeasible stack is refused
the same way everywhere.
"""

from __future__ import annotations

from ..spec import Environment
from .gang_rules import gang_violations
from .image_rules import image_violations
from .kind_rules import kind_violations, kind_warnings
from .launcher_rules import launcher_violations
from .paths import checkpoint_violations
from .stand_in_rules import stand_in_violations, stand_in_warnings
from .verl_rules import verl_violations
from .violation import Violation
from .vllm_env import vllm_env_warnings

__all__ = ["Violation", "violations", "warnings"]

# Kind rules after which the stack's Ray object cannot even be rendered.
UNRENDERABLE = frozenset({"raycronjob-schedule"})


def violations(env: Environment) -> list[Violation]:
    """Every feasibility rule the environment breaks, target-independent rules first."""
    found = [*gang_violations(env), *verl_violations(env), *image_violations(env), *checkpoint_violations(env)]
    found += stand_in_violations(env)
    kinds = kind_violations(env)
    found += kinds
    if any(v.rule in UNRENDERABLE for v in kinds):
        # Nothing of the job's kind can be rendered to judge the rest on.
        return found
    if env.target == "kubernetes":
        from .kubernetes_rules import kubernetes_violations

        found += kubernetes_violations(env)
    else:
        from .slurm_rules import slurm_violations

        found += slurm_violations(env)
    return found + launcher_violations(env)


def warnings(env: Environment) -> list[Violation]:
    """What may be wrong but the project cannot see from the stack file alone; never refuses a stack."""
    if env.target == "slurm":
        from .paths import slurm_path_warnings
        from .slurm_rules import slurm_warnings

        return [*slurm_path_warnings(env), *slurm_warnings(env), *vllm_env_warnings(env)]
    from .kubernetes_rules import kubernetes_warnings

    return [*stand_in_warnings(env), *kubernetes_warnings(env), *kind_warnings(env), *vllm_env_warnings(env)]
