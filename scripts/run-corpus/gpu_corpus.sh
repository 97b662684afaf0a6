#!/usr/bin/env bash
# One device call of the `vramscope run --prove` corpus (issue 32; docs/run-validation.md):
#   bash scripts/run-corpus/gpu_corpus.sh calibrate CASE…   the machine, the carried binary,
#                                                            the caps (calibrate.py), then CASE…
#   bash scripts/run-corpus/gpu_corpus.sh prove CASE…       CASE… with the committed caps
# The vramscope binary travels xz-compressed in target/corpus-bin/ (built on the CPU machine).
# Everything lands in $OUT; each call stops starting cases 40 s before CALL_SECONDS (default 560).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mode=$1; shift
mkdir -p "$OUT"
log="$OUT/corpus-$mode.log"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__)'
  xz -dc target/corpus-bin/vramscope.xz >/tmp/vramscope && chmod +x /tmp/vramscope
  /tmp/vramscope --version
  if [ "$mode" = calibrate ]; then
    echo "== does this PyTorch take a per-process cap from PYTORCH_CUDA_ALLOC_CONF?"
    PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:0.01 python3 -c '
import torch
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); print("cap-from-conf: no (2 GiB allocated under 0.01)")
except Exception as e:
    print("cap-from-conf:", type(e).__name__, str(e).splitlines()[0][:200])
' 2>&1 | tail -2
    python3 scripts/run-corpus/calibrate.py "$OUT" "$@"
  fi
  echo "== corpus after $SECONDS s"
  CORPUS_DEADLINE_SECONDS=$((${CALL_SECONDS:-560} - 40 - SECONDS)) python3 scripts/run-corpus/run_corpus.py /tmp/vramscope "$OUT" "$@"
  echo "== done after $SECONDS s"
} >"$log" 2>&1
tail -c 5000 "$log"
