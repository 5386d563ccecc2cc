"""The `grpo-infra` command line: synthesize, review and check stacks without a cloud account.

Every subcommand lives in its own module, imported only when that subcommand runs: `grpo-infra --help`
lists them from `SUBCOMMANDS` below without importing the spec (pydantic models), the renderers, Pulumi
or a local cluster's code, so it answers at once, and a command never pays for another's imports.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer._click import Command, Context


@dataclass(frozen=True)
class Subcommand:
    """One entry of the root's command list.

    `summary` is what `grpo-infra --help` prints beside the name: the first paragraph of the command's
    own help (its docstring, or its Typer app's `help`), kept equal to it by tests/test_cli_lazy.py.
    `help` is given only where the root sets a group's help itself (Typer's `add_typer(help=...)`)."""

    name: str
    module: str
    attribute: str
    summary: str
    help: str | None = None

    def load(self) -> Command:
        """The subcommand's click command, built by Typer exactly as an eager registration would."""
        target = getattr(importlib.import_module(f"{__name__}.{self.module}"), self.attribute)
        holder = typer.Typer()
        if isinstance(target, typer.Typer):
            holder.add_typer(target, name=self.name, **({"help": self.help} if self.help is not None else {}))
        else:
            holder.command(self.name)(target)
        return typer.main.get_group(holder).commands[self.name]


# In the order `--help` lists them: Typer lists single commands before groups.
SUBCOMMANDS = (
    Subcommand("stacks", "stacks", "stacks", "List the stacks in stacks/ with their target, size and gang."),
    Subcommand(
        "synth", "synth", "synth", "Render STACK's Kubernetes objects, Helm releases and Slurm files to OUT/STACK/."
    ),
    Subcommand(
        "diff",
        "diff",
        "diff",
        "Render STACK from the working tree and from a git ref; show a summary and a unified diff.",
    ),
    Subcommand(
        "check",
        "check",
        "check",
        "Check STACK's gang feasibility statically: exit 0 feasible, 1 with every violation, 2 bad input.",
    ),
    Subcommand(
        "graph",
        "graph",
        "graph",
        "Show the resources STACK's Pulumi program registers: type, name, parent, dependencies, inputs.",
    ),
    Subcommand(
        "submit",
        "submit",
        "submit_command",
        "Submit STACK's verl command to its running RayCluster: prints the submission id and how to follow it;\n"
        "exit 1 when the cluster is not Ready, not admitted for this job, or already running a job (`--force`).",
    ),
    Subcommand("up", "engine", "up", "`pulumi up` of STACK: create or update everything it declares."),
    Subcommand(
        "preview",
        "engine",
        "preview",
        "`pulumi preview --diff` of STACK: what `up` would change, property by property.",
    ),
    Subcommand(
        "destroy", "engine", "destroy", "`pulumi destroy` of STACK: delete everything it made, dependents first."
    ),
    Subcommand(
        "nccl",
        "nccl",
        "app",
        "Read nccl-tests output and NCCL logs; judge the fabric.",
        help="Read nccl-tests output and NCCL logs; judge the fabric.",
    ),
    Subcommand(
        "image",
        "image",
        "app",
        "The job's image: lock its Python set, build its CPU variant for the local cluster (docs/images.md).",
    ),
    Subcommand(
        "sandbox",
        "sandbox",
        "app",
        "A local Slurm cluster (slurmctld + one slurmd per network namespace) to run the rendered sbatch on.",
    ),
    Subcommand(
        "kube",
        "kube",
        "app",
        "A local Kubernetes (etcd, API server, scheduler, controller manager, Kueue, KubeRay, and the "
        "stack's nodes: real kubelets and containers, or KWOK).",
    ),
    Subcommand(
        "rehearse",
        "rehearse",
        "rehearse",
        "Run STACK's own objects on local real nodes shaped like its pools, shrunk to fit; fail where the cloud would.",
    ),
)


class LazyGroup(TyperGroup):
    """The root group: lists `SUBCOMMANDS` by name and summary, imports a subcommand when it is resolved."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._pending = {entry.name: entry for entry in SUBCOMMANDS}
        for entry in SUBCOMMANDS:
            # What `--help` and a typo's suggestion need: the name and the one-line summary.
            self.commands[entry.name] = TyperCommand(
                name=entry.name, help=entry.summary, rich_markup_mode=self.rich_markup_mode
            )

    def load(self, name: str) -> Command | None:
        """The real command for `name` (imported now if it was still only listed)."""
        entry = self._pending.pop(name, None)
        if entry is not None:
            self.commands[name] = entry.load()
        return self.commands.get(name)

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return name, (self.load(name) if name is not None else command), rest


app = typer.Typer(
    name="grpo-infra",
    help="Gang-scheduled Ray clusters for verl GRPO, from one typed spec per environment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyGroup,
)


@app.callback()
def _root() -> None:
    """No options of its own: the subcommands do the work (Typer makes a group of a Typer with a callback)."""


def main() -> None:
    app()
