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

# The suite's own Ray cluster as on a machine where Ray never ran: an empty /tmp of its own (a private
# mount namespace; as a user, a user namespace too), so no /tmp/ray exists. Afterwards that /tmp holds
# nothing of Ray's and no temp dir of the suite. Skipped where namespaces are not allowed.
ray_tests=(tests/preflight/test_ray_allreduce.py)
# A checkout that itself lives under /tmp is carried over onto the fresh /tmp at the same path (its
# venv's scripts name that path), through a bind mount parked on /mnt while /tmp is replaced.
# shellcheck disable=SC2016 # expanded by the inner shell
fresh_tmp_check='set -e; repo=$PWD; keep=
case "$repo" in /tmp/*) keep=${repo#/tmp/}; keep=${keep%%/*}; mount --bind "$repo" /mnt ;; esac
mount -t tmpfs grpo-fresh-tmp /tmp
if [ -n "$keep" ]; then mkdir -p "$repo"; mount --move /mnt "$repo"; fi
cd "$repo"
python -m pytest -p no:cacheprovider "$@"
left=$(ls -A /tmp | grep -v -e "^pytest-of-" -e "^${keep:-^}\$" || true)
[ -z "$left" ] || { echo "the Ray tests left in a fresh /tmp: $left" >&2; exit 1; }'
if [ "$(id -u)" -eq 0 ]; then
  fresh_tmp=(unshare --mount --propagation private --)
else
  fresh_tmp=(unshare --user --map-root-user --mount --propagation private --)
fi
if "${fresh_tmp[@]}" true 2>/dev/null; then
  "${fresh_tmp[@]}" sh -c "$fresh_tmp_check" fresh-tmp "${ray_tests[@]}"
  python -m pytest "${ray_tests[@]/#/--ignore=}" "$@"
else
  echo "no mount namespaces here: the Ray tests run on this machine's /tmp" >&2
  python -m pytest "$@"
fi
