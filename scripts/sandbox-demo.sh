#!/usr/bin/env bash
# The local Slurm sandbox end to end: synth local-slurm, build a 3-node Slurm cluster on this machine,
# submit the rendered GRPO sbatch (with a small Ray probe in place of verl), show the gang across the
# nodes, tear everything down. Needs root; takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

stack=local-slurm
grpo-infra synth "$stack" --out build
trap 'grpo-infra sandbox down >/dev/null' EXIT
grpo-infra sandbox up --stack "$stack" --nodes 3
eval "$(grpo-infra sandbox env)"
grpo-infra sandbox status

workdir=$(mktemp -d)
checkpoints=/run/grpo-sandbox/shared/checkpoints/demo
export GRPO_ENTRYPOINT="python -m grpo_infra.sandbox.probe --checkpoint-dir $checkpoints --steps 3"
export GRPO_RAY_READY_TIMEOUT=180
script="$PWD/build/$stack/slurm/grpo.sbatch"
job=$(cd "$workdir" && sbatch --parsable "$script")
echo "submitted build/$stack/slurm/grpo.sbatch as job $job"
for _ in $(seq 1 300); do
  state=$(scontrol show job "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case $state in
    RUNNING) squeue -h -j "$job" -o "job %i %T on %N for %M" ;;
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
  esac
  sleep 2
done
grep -E '^grpo' "$workdir"/*.out | grep -E 'joined|fabric gate|training launched|exited' || true
python -m grpo_infra.sandbox.show "$job"
rm -rf "$workdir"
[ "$state" = COMPLETED ] || { echo "job $job ended $state" >&2; exit 1; }
