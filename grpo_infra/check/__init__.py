"""Static gang feasibility: would this stack's job ever be admitted, and would verl accept it?

`synth`, `check` and the Pulumi program all call `violations(env)`, so an infeasible stack is refused
the same way everywhere. A rule the stack waives (`checks.waive`) is still judged: `findings(env)` and
`cautions(env)` hold it, and `check` shows it with the stack's reason; it just refuses nothing.
"""

from __future__ import annotations

from ..spec import Environment
from ..spec.check_rules import RULES, Severity
from .engine_pins import engine_pin_warnings
from .gang_rules import gang_violations
from .image_rules import image_violations
from .kind_rules import kind_violations, kind_warnings
from .launcher_rules import launcher_violations
from .layout_rules import layout_violations
from .paths import checkpoint_violations
from .stand_in_rules import stand_in_violations, stand_in_warnings
from .verl_rules import verl_violations
from .violation import Violation
from .vllm_env import vllm_env_warnings
from .waivers import Waived, unwaived, waived

__all__ = ["Violation", "Waived", "cautions", "findings", "unwaived", "violations", "waived", "warnings"]

# Kind rules after which the stack's Ray object cannot even be rendered (none of them may be waived).
UNRENDERABLE = frozenset({"raycronjob-schedule"})


def violations(env: Environment) -> list[Violation]:
    """Every feasibility rule the environment breaks and does not waive: what refuses the stack."""
    return unwaived(env, findings(env))


def warnings(env: Environment) -> list[Violation]:
    """The warnings the environment does not waive."""
    return unwaived(env, cautions(env))


def findings(env: Environment) -> list[Violation]:
    """Every feasibility rule the environment breaks, waived or not, target-independent rules first."""
    found = [
        *gang_violations(env),
        *layout_violations(env),
        *verl_violations(env),
        *image_violations(env),
        *checkpoint_violations(env),
    ]
    found += stand_in_violations(env)
    kinds = kind_violations(env)
    found += kinds
    if any(v.rule in UNRENDERABLE for v in kinds):
        # Nothing of the job's kind can be rendered to judge the rest on.
        return of_severity("error", found)
    if env.target == "kubernetes":
        from .kubernetes_rules import kubernetes_violations

        found += kubernetes_violations(env)
    else:
        from .slurm_rules import slurm_violations

        found += slurm_violations(env)
    return of_severity("error", found + launcher_violations(env))


def cautions(env: Environment) -> list[Violation]:
    """What may be wrong but the project cannot see from the stack file alone, waived or not; never
    refuses a stack."""
    if env.target == "slurm":
        from .paths import slurm_path_warnings
        from .slurm_rules import slurm_warnings

        return of_severity(
            "warning",
            [*slurm_path_warnings(env), *slurm_warnings(env), *vllm_env_warnings(env), *engine_pin_warnings(env)],
        )
    from .kubernetes_rules import kubernetes_warnings

    found = [*stand_in_warnings(env), *kubernetes_warnings(env), *kind_warnings(env), *vllm_env_warnings(env)]
    found += engine_pin_warnings(env)
    return of_severity("warning", found)


def of_severity(severity: Severity, found: list[Violation]) -> list[Violation]:
    """`found`, refused when one of them is registered with another severity: an error listed as a
    warning would never fail a stack, a warning listed as an error would fail one the docs call fine."""
    for v in found:
        if RULES[v.rule].severity != severity:
            raise ValueError(f"rule {v.rule} is registered as {RULES[v.rule].severity} but found as {severity}")
    return found
