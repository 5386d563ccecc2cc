#!/usr/bin/env bash
# The whole test suite: set up, lint, then every test (unit, Pulumi mocks, schemas, Slurm sandbox).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

ruff check .
ruff format --check .
python -m pytest "$@"
