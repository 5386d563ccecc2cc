"""The `grpo-infra` command line: synthesize, review and check stacks without a cloud account."""

from __future__ import annotations

import typer

from .check import check
from .diff import diff
from .engine import COMMANDS as ENGINE_COMMANDS
from .graph import graph
from .image import app as image_app
from .kube import app as kube_app
from .nccl import app as nccl_app
from .sandbox import app as sandbox_app
from .stacks import stacks
from .synth import synth

app = typer.Typer(
    name="grpo-infra",
    help="Gang-scheduled Ray clusters for verl GRPO, from one typed spec per environment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(stacks)
app.command()(synth)
app.command()(diff)
app.command()(check)
app.command()(graph)
app.add_typer(nccl_app, name="nccl", help="Read nccl-tests output and NCCL logs; judge the fabric.")
app.add_typer(image_app, name="image")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(kube_app, name="kube")
for command in ENGINE_COMMANDS:
    app.command()(command)


def main() -> None:
    app()
