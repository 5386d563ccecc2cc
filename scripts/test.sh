#!/usr/bin/env bash
# The whole test suite: set up, lint, then every test (unit, schemas, Pulumi mocks, verl's config,
# real Ray, and the real Slurm sandbox when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/install-system-deps.sh
fi
bash scripts/setup.sh
# The local Kubernetes' binaries (tests/kube): built once from Go modules, cached by version.
if command -v go >/dev/null; then
  bash scripts/build-kube.sh || echo "build-kube failed: the local-Kubernetes tests will say what is missing"
fi
export PATH="$PWD/.venv/bin:$PATH"
# Nothing in the suite reports usage anywhere.
export RAY_USAGE_STATS_ENABLED=0

ruff check .
ruff format --check .
python -m pytest "$@"
