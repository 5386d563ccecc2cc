#!/usr/bin/env bash
# The main job: set up; list, check and synthesize every stack; then run the local-slurm stack for real
# on a 3-node Slurm sandbox on this machine (needs root) and show the gang across the nodes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

grpo-infra stacks
for file in stacks/Pulumi.*.yaml; do
  stack=${file#stacks/Pulumi.}
  stack=${stack%.yaml}
  grpo-infra check "$stack"
  grpo-infra synth "$stack" --out build
done
echo "Rendered output is in build/<stack>/; compare a change with: grpo-infra diff <stack>"

if [ "$(id -u)" -eq 0 ]; then
  bash scripts/sandbox-demo.sh
else
  echo "Not root: skipping the local Slurm sandbox run (scripts/sandbox-demo.sh needs root)." >&2
fi
