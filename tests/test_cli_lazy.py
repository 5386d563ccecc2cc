"""`grpo-infra --help` answers without importing the subcommands: the spec's pydantic models, the
renderers, Pulumi and the local clusters' code load only for the command that runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from grpo_infra.cli import SUBCOMMANDS, LazyGroup, app

ROOT = Path(__file__).resolve().parents[1]

# What --help prints, then which of the package's modules and of pydantic were imported to print it.
PROBE = """
import json, sys
from typer.testing import CliRunner
from grpo_infra.cli import app
result = CliRunner().invoke(app, ["--help"])
print(json.dumps({"exit": result.exit_code, "output": result.output,
                  "modules": sorted(m for m in sys.modules if m.startswith(("grpo_infra", "pydantic")))}))
"""


def test_help_lists_every_subcommand_without_importing_any() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["exit"] == 0
    assert all(f" {entry.name} " in probe["output"] for entry in SUBCOMMANDS)
    assert probe["modules"] == ["grpo_infra", "grpo_infra.cli"]


def test_each_listed_summary_is_the_commands_own_help() -> None:
    """The one line `--help` shows beside a name is what the command, once imported, says of itself."""
    group = typer.main.get_command(app)
    assert isinstance(group, LazyGroup)
    for entry in SUBCOMMANDS:
        command = group.load(entry.name)
        assert command is not None and command.name == entry.name
        own = (command.short_help or command.help or "").split("\n\n")[0].strip()
        assert entry.summary == own, entry.name


def test_a_mistyped_command_is_answered_with_the_nearest_name() -> None:
    result = CliRunner().invoke(app, ["synht"])
    assert result.exit_code == 2
    assert "Did you mean 'synth'?" in result.output
