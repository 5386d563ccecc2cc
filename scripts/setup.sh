#!/usr/bin/env bash
# Create .venv and install grpo-infra with its pinned dependencies. Idempotent; quiet when current.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# This machine kind keeps a CPU build of torch on disk; without it pip would fetch a CUDA build of
# several GB for the fabric gate's extra.
if [ -d /opt/wheels ]; then
  export PIP_FIND_LINKS=${PIP_FIND_LINKS:-/opt/wheels}
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.grpo-infra-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,sandbox,preflight,aws,gcp]'
  # verl ships its full Hydra trainer config; the tests read it. Its runtime stack (torch, vLLM)
  # is not needed to check overrides, hence --no-deps.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps verl==0.9.1
  touch "$stamp"
fi

# SkyPilot and dstack, whose own parsers the launcher tests load rendered files with; a venv of their
# own because skypilot's click pin conflicts with the CLI's (requirements-launchers.txt).
lstamp=.venv-launchers/.installed
if [ ! -f "$lstamp" ] || [ requirements-launchers.txt -nt "$lstamp" ]; then
  [ -x .venv-launchers/bin/python ] || "$PYTHON" -m venv .venv-launchers
  .venv-launchers/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-launchers.txt
  touch "$lstamp"
fi
