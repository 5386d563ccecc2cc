#!/usr/bin/env bash
# Create .venv and install grpo-infra with its pinned dependencies. Idempotent; quiet when current.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# uv installs the same pins pip would (same resolution, checked package by package), with parallel
# downloads and a cache it links from: a clean clone (as CI runs) builds its venvs in about 40 s, not 3 min.
UV_VERSION=0.9.5
# This machine kind keeps a CPU build of torch on disk; without it the installer would fetch a CUDA build
# of several GB for the fabric gate's extra.
find_links=()
if [ -d /opt/wheels ]; then
  find_links=(--find-links /opt/wheels)
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ "$(.venv/bin/uv --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
install() { .venv/bin/uv pip install --quiet --native-tls --python "$1" "${find_links[@]}" "${@:2}"; }
stamp=.venv/.grpo-infra-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # pip stays in the venv: the wheel test builds the package with it, as a user does.
  install .venv/bin/python pip==25.3
  install .venv/bin/python -e '.[dev,sandbox,preflight,aws,gcp]'
  # verl ships its full Hydra trainer config; the tests read it. Its runtime stack (torch, vLLM)
  # is not needed to check overrides, hence --no-deps.
  install .venv/bin/python --no-deps verl==0.9.1
  touch "$stamp"
fi

# SkyPilot and dstack, whose own parsers the launcher tests load rendered files with; a venv of their
# own because skypilot's click pin conflicts with the CLI's (requirements-launchers.txt).
lstamp=.venv-launchers/.installed
if [ ! -f "$lstamp" ] || [ requirements-launchers.txt -nt "$lstamp" ]; then
  [ -x .venv-launchers/bin/python ] || "$PYTHON" -m venv .venv-launchers
  install .venv-launchers/bin/python -r requirements-launchers.txt
  touch "$lstamp"
fi
