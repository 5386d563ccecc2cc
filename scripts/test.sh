#!/usr/bin/env bash
# The whole test suite: set up, lint, then every test (unit, schemas, Pulumi mocks, verl's config,
# real Ray, and the real Slurm sandbox when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/install-system-deps.sh
fi
# The local Kubernetes' binaries (the tests marked `cluster`): built once from Go modules, cached by
# version (its build program needs only the standard library, so it starts before the venv). Cold, the
# build takes 20-30 minutes of both cores; it runs in the background at the lowest priority while the
# venv is installed and lint and every test that needs no binary run; the `cluster` tests wait for it.
# Warm, it takes seconds.
build_log=$(mktemp)
build_pid=
if command -v go >/dev/null; then
  setsid nice -n 19 bash scripts/build-kube.sh >"$build_log" 2>&1 &
  build_pid=$!
fi
# A run that stops early (lint, a failed test) takes the build down with it: its own process group.
trap '[ -z "$build_pid" ] || kill -- "-$build_pid" 2>/dev/null; rm -f "$build_log"' EXIT
bash scripts/setup.sh
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
  others=("${ray_tests[@]/#/--ignore=}")
else
  echo "no mount namespaces here: the Ray tests run on this machine's /tmp" >&2
  others=()
fi
python -m pytest -m "not cluster" "${others[@]}" "$@"
if [ -n "$build_pid" ]; then
  build_rc=0
  wait "$build_pid" || build_rc=$?
  cat "$build_log"
  build_pid=
  [ "$build_rc" -eq 0 ] || echo "build-kube failed: the local-Kubernetes tests will say what is missing"
fi
# Arguments naming only tests of the first part leave none here (pytest's exit 5): that is no failure.
rc=0
python -m pytest -m cluster "${others[@]}" "$@" || rc=$?
[ "$rc" -eq 0 ] || { [ "$rc" -eq 5 ] && [ $# -gt 0 ]; } || exit "$rc"
