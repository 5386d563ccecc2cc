#!/usr/bin/env bash
# Build the local Kubernetes' programs (etcd, the control plane, kubectl, Kueue, KubeRay, KWOK, the
# Pulumi CLI and its Kubernetes provider) from pinned Go modules into
# ${GRPO_INFRA_CACHE:-~/.cache/grpo-infra}/kube/<component>-<version>/. Built versions are reused.
# Usage: scripts/build-kube.sh [component ...]     (see docs/local-kubernetes.md)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m grpo_infra.kube.build "$@"
