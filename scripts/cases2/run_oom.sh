#!/usr/bin/env bash
# The cases2 OOM corpus on a GPU machine (issue 10): original runs with artifacts, then real
# re-runs under candidate fixes. Run from anywhere; needs python3 with torch and nvidia-smi.
#   bash scripts/cases2/run_oom.sh --smoke   # every code path at tiny sizes, under a minute
#   bash scripts/cases2/run_oom.sh           # the corpus, under 4.5 minutes
#   bash scripts/cases2/run_oom.sh --cases two_streams   # some cases only (comma-separated)
# Output in $OUT (default /tmp/cases2-out): cases2-oom-<mode>.tar.xz and cases2-oom-<mode>.log.
set -u
cd "$(dirname "$0")/../.." || exit 1
MODE=full
EXTRA=()
if [ "${1:-}" = "--smoke" ]; then MODE=smoke; EXTRA=(--smoke); shift; fi
# Further arguments go to run_oom.py, e.g. --cases two_streams (one case and its re-runs).
EXTRA+=("$@")
OUT=${OUT:-/tmp/cases2-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
export PYTHONDONTWRITEBYTECODE=1
LOG="$OUT/cases2-oom-$MODE.log"
ARCHIVE="$OUT/cases2-oom-$MODE.tar.xz"
WORK=/tmp/cases2-oom-work
LIMIT=262
if [ "$MODE" = smoke ]; then LIMIT=75; fi
{ date -u; nvidia-smi -L; git log -1 --format='commit %H' 2>/dev/null; } > "$LOG" 2>&1
timeout -k 5 "$LIMIT" python3 -u scripts/cases2/run_oom.py --work "$WORK" --archive "$ARCHIVE" \
    "${EXTRA[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ ! -s "$ARCHIVE" ] && [ -d "$WORK" ]; then
    echo "run_oom.py ended without packing (exit $rc): packing what there is" | tee -a "$LOG"
    tar -C "$WORK" -cJf "$ARCHIVE" . >>"$LOG" 2>&1
fi
echo "exit $rc; $(ls -la "$ARCHIVE" 2>&1)" | tee -a "$LOG"
