#!/usr/bin/env bash
# Final regression check on the H200 with this session's binary: info, record (no --demo: must use
# the real GPU), inspect, diagnose --live.
set -u
D=.device/final
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
exec > >(tee "$OUT/run.log") 2>&1
date -u; nvidia-smi -L
python3 $D/hold.py 4 60 &
HOLD=$!
sleep 10
echo "== info"; $D/vramscope info; echo "rc=$?"
echo "== record 6 s (no --demo)"; $D/vramscope record --duration 6 --interval-ms 100 --out /tmp/real.vramcap; echo "rc=$?"
echo "== inspect"; $D/vramscope inspect /tmp/real.vramcap; echo "rc=$?"
$D/vramscope inspect --json /tmp/real.vramcap > "$OUT/inspect.json"; echo "rc=$?"
echo "== diagnose --live"; $D/vramscope diagnose --live; echo "rc=$?"
nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader
kill $HOLD; wait $HOLD 2>/dev/null
cp /tmp/real.vramcap "$OUT/" 2>/dev/null
date -u
