#!/usr/bin/env bash
# The main job: set up, list the stacks, synthesize every one of them, and summarize the output.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

grpo-infra stacks
for stack in $(ls stacks | sed -n 's/^Pulumi\.\(.*\)\.yaml$/\1/p'); do
  grpo-infra synth "$stack" --out build
done
echo "Rendered output is in build/<stack>/; review it, or compare with: grpo-infra diff <stack>"
