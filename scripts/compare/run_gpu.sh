#!/usr/bin/env bash
# One GPU session's runs for issues 32 and 33 (device tool: `bash scripts/compare/run_gpu.sh`):
# the compare fixtures (scripts/compare/workloads.py) and the `vramscope run` hook on real PyTorch
# (scripts/run/*.py). Everything lands in $OUT (tar.xz of the snapshots, logs as text).
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/compare; R=/tmp/runhook
rm -rf "$W" "$R"; mkdir -p "$W" "$R" "$OUT"
log="$OUT/gpu-run.log"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
  # Issue 33: compare fixtures.
  python3 scripts/compare/workloads.py "$W" leak
  python3 scripts/compare/workloads.py "$W" batch 64
  python3 scripts/compare/workloads.py "$W" batch 256
  python3 scripts/compare/workloads.py "$W" fix before
  python3 scripts/compare/workloads.py "$W" fix after
  # Three ranks at once, different shares of the work.
  RANK=0 python3 scripts/compare/workloads.py "$W" rank 0 32 &
  RANK=1 python3 scripts/compare/workloads.py "$W" rank 1 128 &
  RANK=2 python3 scripts/compare/workloads.py "$W" rank 2 64 &
  wait
  ls -l "$W"
  # Issue 32: the hook on real PyTorch, no code changes in the job.
  hook="$PWD/assets/python/vramscope_run"
  echo "== oom job under the hook"
  PYTHONPATH="$hook" VRAMSCOPE_RUN_DIR="$R/oom" RANK=3 python3 scripts/run/oom_job.py; echo "exit $?"
  find "$R/oom" -type f | sort
  cat "$R"/oom/progress/*.oom.json 2>/dev/null; echo
  echo "== oom job without the hook"
  python3 scripts/run/oom_job.py; echo "exit $?"
  echo "== step time: off, then none, python, all"
  python3 scripts/run/step_time.py 20 16
  for stacks in none python all; do
    PYTHONPATH="$hook" VRAMSCOPE_RUN_DIR="$R/time-$stacks" VRAMSCOPE_RUN_STACKS=$stacks \
      python3 scripts/run/step_time.py 20 16
  done
} >"$log" 2>&1
tar -C "$W" -cJf "$OUT/compare-fixtures.tar.xz" .
tar -C "$R" -cJf "$OUT/runhook.tar.xz" oom
tail -c 3000 "$log"
