"""The typed environment spec: one per stack file."""

from .environment import Environment, Gang
from .load import ENVIRONMENT_KEY, PROJECT, SpecError, Stack, environment_from_config, list_stacks, load_stack

__all__ = [
    "ENVIRONMENT_KEY",
    "PROJECT",
    "Environment",
    "Gang",
    "SpecError",
    "Stack",
    "environment_from_config",
    "list_stacks",
    "load_stack",
]
