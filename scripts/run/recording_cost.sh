#!/usr/bin/env bash
# The cost of the hook's recording on real training steps (issue 32): scripts/run/step_time.py
# (a 12-layer transformer encoder, bf16 autocast, AdamW) alone and under `vramscope run
# --stacks none|python|all`, in ROUNDS interleaved rounds so that drift spreads over all modes.
# Prints one line per run: the mode, then step_time.py's JSON.
#   bash scripts/run/recording_cost.sh VRAMSCOPE [ROUNDS]
set -uo pipefail
vramscope=$1
rounds=${2:-3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
for round in $(seq "$rounds"); do
  for mode in off none python all; do
    if [ "$mode" = off ]; then
      line=$(python3 scripts/run/step_time.py 20 16 | grep '^{')
    else
      line=$("$vramscope" run --stacks "$mode" --out /tmp/recording-cost-runs -- \
        python3 scripts/run/step_time.py 20 16 | grep '^{')
    fi
    echo "round $round $mode $line"
  done
done
