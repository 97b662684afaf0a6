#!/usr/bin/env bash
# One device call of the `vramscope run --prove` corpus (issue 32; docs/run-validation.md):
#   bash scripts/run-corpus/gpu_corpus.sh calibrate CASE…   the machine, the carried binary,
#                                                            the caps (calibrate.py), then CASE…
#   bash scripts/run-corpus/gpu_corpus.sh prove CASE…       CASE… with the committed caps
#   bash scripts/run-corpus/gpu_corpus.sh caps CASE…        the caps alone (no binary needed)
# The vramscope binary travels xz-compressed in target/corpus-bin/ (built on the CPU machine).
# Everything is written to a work folder and packed into one archive in $OUT at the end (the
# device tool brings back at most 8 files): $OUT/corpus-<mode>-<first case>.tar.xz and its log.
# Each call stops starting cases 40 s before CALL_SECONDS (default 560).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mode=$1; shift
work=/tmp/corpus-out
mkdir -p "$OUT" "$work"
log="$work/corpus-$mode.log"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
  if [ "$mode" != caps ]; then
    xz -dc target/corpus-bin/vramscope.xz >/tmp/vramscope && chmod +x /tmp/vramscope
    /tmp/vramscope --version
  fi
  if [ "$mode" != prove ]; then
    echo "== does this PyTorch take a per-process cap from PYTORCH_CUDA_ALLOC_CONF?"
    PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.01 python3 -c '
import torch
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); print("cap-from-conf: no (2 GiB allocated under 0.01)")
except Exception as e:
    print("cap-from-conf:", type(e).__name__, str(e).splitlines()[0][:200])
' 2>&1 | tail -2
    timeout $((${CALL_SECONDS:-560} - 40 - SECONDS)) python3 scripts/run-corpus/calibrate.py "$work" "$@"
  fi
  echo "== corpus after $SECONDS s"
  [ "$mode" = caps ] || CORPUS_DEADLINE_SECONDS=$((${CALL_SECONDS:-560} - 40 - SECONDS)) python3 scripts/run-corpus/run_corpus.py /tmp/vramscope "$work" "$@"
  echo "== done after $SECONDS s"
} >"$log" 2>&1
tar -C "$work" -cJf "$OUT/corpus-$mode-$1.tar.xz" .
cp "$log" "$OUT/"
ls -la "$OUT"
tail -c 5000 "$log"
