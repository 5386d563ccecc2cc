#!/usr/bin/env bash
# The whole test suite: set up, lint, then every test (unit, schemas, Pulumi mocks, verl's config,
# real Ray, and the real Slurm sandbox when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints one line, "test-phase NAME SECONDS" (benchmarks/test_command_bench.py reads them).
started=$(date +%s)
phase() { local now; now=$(date +%s); echo "test-phase $1 $((now - started))"; started=$now; }
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/install-system-deps.sh
fi
phase apt
# The local Kubernetes' binaries (the tests marked `cluster`): built once from Go modules, cached by
# version (its build program needs only the standard library, so it starts before the venv). Cold, the
# build takes 20-30 minutes of both cores; it runs in the background while the venv is installed and lint
# and every test that needs no binary run; the `cluster` tests wait for it. On a fresh machine the build
# and then the `cluster` tests (about 40 minutes, mostly waiting on pods) are the longest path, so the
# build keeps the normal priority and the tests without a cluster yield to it (`nice -n 5` below): at
# `nice 19` beside them it took 43 minutes instead of about 21. Warm, it takes seconds.
# Its exit status lands in $build_rc when it ends.
build_log=$(mktemp)
build_rc=$(mktemp)
cluster_log=$(mktemp)
rest_log=$(mktemp)
build_pid=
cluster_pid=
if command -v go >/dev/null; then
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'start=$(date +%s); bash scripts/build-kube.sh >"$1" 2>&1; rc=$?
    echo "test-phase go-builds $(($(date +%s) - start))" >>"$1"; echo $rc >"$2"' build-kube "$build_log" "$build_rc" &
  build_pid=$!
else
  echo 0 >"$build_rc"
fi
# A run that stops early (lint, a failed test) takes the build and the cluster tests down with it: each
# runs in its own process group.
trap '[ -z "$build_pid" ] || kill -- "-$build_pid" 2>/dev/null; [ -z "$cluster_pid" ] || kill -- "-$cluster_pid" 2>/dev/null; rm -f "$build_log" "$build_rc" "$cluster_log" "$rest_log"' EXIT
bash scripts/setup.sh
phase venv
export PATH="$PWD/.venv/bin:$PATH"
# Nothing in the suite reports usage anywhere.
export RAY_USAGE_STATS_ENABLED=0
# A crash in native code, the interpreter's exit included, prints every thread's stack rather than a bare
# "Segmentation fault" (pytest hands the handler back at its end when it was on before it).
export PYTHONFAULTHANDLER=1

ruff check .
ruff format --check .
phase lint

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
  phase ray-fresh-tmp
else
  echo "no mount namespaces here: the Ray tests run on this machine's /tmp" >&2
  others=()
fi
# The `cluster` tests (the local Kubernetes) and the rest run side by side: the local Kubernetes and the
# Slurm sandbox are built to run together (their own namespaces, links, roots and machine locks), and
# most of a cluster test's time is spent waiting for pods, so the two overlap on 2 cores. The cluster
# tests start once the binaries are built (at once, warm); their output follows the others'.
# shellcheck disable=SC2016 # expanded by the inner shell
setsid bash -c 'start=$(date +%s); while [ ! -s "$1" ]; do sleep 5; done
  echo "test-phase cluster-waited-for-builds $(($(date +%s) - start))" >"$2"; start=$(date +%s); rc=0
  python -m pytest -m cluster "${@:3}" >>"$2" 2>&1 || rc=$?
  echo "test-phase cluster-tests $(($(date +%s) - start))" >>"$2"; exit $rc' cluster-tests "$build_rc" "$cluster_log" "${others[@]}" "$@" &
cluster_pid=$!
rc=0
nice -n 5 python -m pytest -m "not cluster" "${others[@]}" "$@" 2>&1 | tee "$rest_log" || rc=$?
phase tests-without-a-cluster
cluster_rc=0
wait "$cluster_pid" || cluster_rc=$?
cluster_pid=
build_pid=
phase waited-for-the-cluster-tests
cat "$build_log"
[ "$(cat "$build_rc")" = 0 ] || echo "build-kube failed: the local-Kubernetes tests say what is missing"
cat "$cluster_log"
# One closing line for both parts, from pytest's own closing lines.
count() {
  for log in "$rest_log" "$cluster_log"; do grep -E '^=+ .* in [0-9.]+s' "$log" | tail -n 1; done |
    grep -oE "[0-9]+ $1" | awk '{n += $1} END {print n + 0}'
}
if [ $# -eq 0 ]; then
  echo "tests: $(count passed) passed, $(($(count failed) + $(count error))) failed, $(count skipped) skipped"
fi
# Arguments naming only tests of one part leave none in the other (pytest's exit 5): that is no failure.
for part in "$rc" "$cluster_rc"; do
  [ "$part" -eq 0 ] || { [ "$part" -eq 5 ] && [ $# -gt 0 ]; } || exit "$part"
done
