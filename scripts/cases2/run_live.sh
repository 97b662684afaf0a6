#!/usr/bin/env bash
# The cases2 live-recorded corpus on a GPU machine (issue 10): each case's job(s) run about a
# minute beside `vramscope record --interval-ms 250` and nvidia-smi CSV logging, one case at a
# time. Needs a release vramscope at .device/bin/vramscope (or $VRAMSCOPE), python3 with torch.
#   bash scripts/cases2/run_live.sh --smoke  # every code path, 4 s per case, under a minute
#   bash scripts/cases2/run_live.sh          # four cases of 60 s, under 4.5 minutes
# Output in $OUT (default /tmp/cases2-out): cases2-live-<mode>.tar.xz and cases2-live-<mode>.log.
set -u
cd "$(dirname "$0")/../.." || exit 1
MODE=full
EXTRA=()
if [ "${1:-}" = "--smoke" ]; then MODE=smoke; EXTRA=(--smoke); fi
OUT=${OUT:-/tmp/cases2-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
export PYTHONDONTWRITEBYTECODE=1
VRAMSCOPE=${VRAMSCOPE:-.device/bin/vramscope}
LOG="$OUT/cases2-live-$MODE.log"
ARCHIVE="$OUT/cases2-live-$MODE.tar.xz"
WORK=/tmp/cases2-live-work
LIMIT=268
if [ "$MODE" = smoke ]; then LIMIT=70; fi
{ date -u; nvidia-smi -L; git log -1 --format='commit %H' 2>/dev/null; } > "$LOG" 2>&1
if [ ! -x "$VRAMSCOPE" ]; then
    echo "WARNING: no executable vramscope at $VRAMSCOPE: only nvidia-smi logs will be recorded" | tee -a "$LOG"
fi
timeout -k 5 "$LIMIT" python3 -u scripts/cases2/run_live.py --work "$WORK" --archive "$ARCHIVE" \
    --vramscope "$VRAMSCOPE" "${EXTRA[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ ! -s "$ARCHIVE" ] && [ -d "$WORK" ]; then
    echo "run_live.py ended without packing (exit $rc): packing what there is" | tee -a "$LOG"
    tar -C "$WORK" -cJf "$ARCHIVE" . >>"$LOG" 2>&1
fi
echo "exit $rc; $(ls -la "$ARCHIVE" 2>&1)" | tee -a "$LOG"
