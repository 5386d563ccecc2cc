"""The verbs both local clusters answer to on the command line (`grpo-infra kube ...`, `grpo-infra sandbox ...`):
one definition for the two labs (grpo_infra/localnode/bringup.py, `Lab`); each lab's `up` is its own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ..localnode.bringup import Lab
from .common import console, fail

KeepOnFailureOption = Annotated[
    bool,
    typer.Option(
        "--keep-on-failure",
        help="When a bring-up step fails, leave what was started up for a look (its logs are copied out either way).",
    ),
]

NodeArgument = Annotated[str, typer.Argument(help="A node of the local cluster (its `status` lists them).")]


def add_lab_verbs(app: typer.Typer, lab: Lab, error: type[Exception], name: str) -> None:
    """down, status, env, kill-node, boot-node and export-logs for `lab`, whose failures are `error`s."""

    @app.command("kill-node")
    def kill_node(node: NodeArgument) -> None:
        """Kill a node the way a machine dies (everything it runs, at once): a node-loss drill."""
        try:
            killed = lab.kill_node(node)
        except error as exc:
            fail(str(exc), code=1)
        console.print(f"killed {len(killed)} processes of node {node}, as a machine dies", highlight=False)

    @app.command("boot-node")
    def boot_node(node: NodeArgument) -> None:
        """Start a killed node again, as a machine that rebooted (its disks kept)."""
        try:
            lab.boot_node(node)
        except error as exc:
            fail(str(exc), code=1)
        console.print(f"booted node {node}", highlight=False)

    @app.command()
    def down() -> None:
        """Stop every process of the local cluster and remove everything it made, inside its root and out."""
        if os.geteuid() != 0:
            fail(f"the {name}'s namespaces and daemons belong to root: run `down` as root")
        for line in lab.down():
            console.print(line, highlight=False)
        console.print(f"{name} down")

    @app.command()
    def status() -> None:
        """The cluster's processes and nodes, and where its bring-up's time went."""
        try:
            console.print(lab.status(), highlight=False, markup=False)
        except error as exc:
            fail(str(exc), code=1)

    @app.command()
    def env() -> None:
        """Print shell exports that point the cluster's own clients at it (use with eval)."""
        try:
            text = lab.env_exports()
        except error as exc:
            fail(str(exc), code=1)
        typer.echo(text)

    @app.command("export-logs")
    def export_logs(
        dest: Annotated[Path, typer.Argument(help="Directory to copy them to (emptied first).")],
    ) -> None:
        """Copy every log of the running cluster (its daemons', each node's) to DEST, paths as under its root."""
        try:
            written = lab.export_logs(dest)
        except error as exc:
            fail(str(exc), code=1)
        console.print(f"{len(written)} log(s) copied to {dest}", highlight=False)
