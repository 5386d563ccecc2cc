#!/usr/bin/env bash
# The local Slurm sandbox end to end: build a 3-node Slurm cluster on this machine from the local-slurm
# stack, submit the GRPO sbatch it rendered (with a small Ray probe in place of verl), show the job's state
# on one live line, then the gang across the nodes; tear everything down. Needs root; about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

stack=local-slurm
trap 'grpo-infra sandbox down >/dev/null' EXIT
grpo-infra sandbox up --stack "$stack" --nodes 3
eval "$(grpo-infra sandbox env)"
grpo-infra sandbox status

workdir=$(mktemp -d)
checkpoints=/run/grpo-sandbox/shared/checkpoints/demo
export GRPO_ENTRYPOINT="python -m grpo_infra.probe --checkpoint-dir $checkpoints --steps 3"
export GRPO_RAY_READY_TIMEOUT=180
# The sbatch `sandbox up` rendered from the stack (the same file `grpo-infra synth` writes).
script="${GRPO_SANDBOX_ROOT:-/run/grpo-sandbox}/stack/slurm/grpo.sbatch"
job=$(cd "$workdir" && sbatch --parsable "$script")
echo "submitted $script as job $job"
# One status line, rewritten in place on a terminal; elsewhere (a log) a line only when the state changes.
last=""
for _ in $(seq 1 600); do
  state=$(scontrol show job "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  # Running: its nodes and time; pending: why (%R), never an empty node list.
  line=$(squeue -h -j "$job" -o "%i|%T|%N|%M|%R" 2>/dev/null | awk -F'|' \
    '$3 != "" {print "job " $1 " " $2 " on " $3 " for " $4; next} {print "job " $1 " " $2 " " $5}' || true)
  [ -n "$line" ] || line="job $job $state"
  if [ -t 1 ]; then
    printf '\r\033[K%s' "$line"
  elif [ "$state" != "$last" ]; then
    echo "$line"
  fi
  last=$state
  case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
  esac
  sleep 0.5
done
if [ -t 1 ]; then echo; fi
grep -E '^grpo' "$workdir"/*.out | grep -E 'joined|fabric gate|training launched|outcome' || true
python -m grpo_infra.sandbox.show "$job"
rm -rf "$workdir"
[ "$state" = COMPLETED ] || { echo "job $job ended $state" >&2; exit 1; }
