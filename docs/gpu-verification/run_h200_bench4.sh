#!/usr/bin/env bash
# Fourth benchmark call (issue 2, sampler CPU): with a PyTorch process holding 8 GiB,
# 1. --compositions at 10 Hz (memory only / memory+util+temp+power / fast tier with process
#    lists every tick / fast tier with adaptive process lists), each with nvidia-smi side by side;
# 2. the normal bench at 10 Hz (tiers, everything) against nvidia-smi with the full field list
#    and with the verification query, both side by side;
# 3. the same while a second PyTorch process changes memory every 0.5 s (churn.py), so that the
#    adaptive lists are read more often: the two fast-tier compositions and tiers.
# $D/sampler4 is the stripped `cargo build --bench sampler` binary (target/debug/deps/sampler-*).
# About 3 minutes. Results (run.log, *.json) in $OUT/results.tar.gz and $OUT/run.log.
set -u
D=.device/nvml
R=/tmp/results
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
exec > >(tee "$OUT/run.log") 2>&1
finish() { cp "$R"/*.json "$OUT"/ 2>/dev/null; (cd /tmp && tar czf "$OUT/results.tar.gz" results); }
trap finish EXIT
date -u; uname -r; nproc; nvidia-smi -L
nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 $D/hold.py 8 230 &
HOLD=$!
sleep 12
nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader
echo "== 1. compositions, 10 Hz, 8 s each, memory steady"
timeout 70 $D/sampler4 --bench --compositions --seconds 8 --interval-ms 100 --out "$R/compositions-steady.json"; echo "rc=$?"
echo "== 2. bench 10 Hz, 25 s, memory steady"
timeout 80 $D/sampler4 --bench --seconds 25 --interval-ms 100 --out "$R/bench-100ms-steady.json"; echo "rc=$?"
echo "== 3. memory changing every 0.5 s"
python3 $D/churn.py 75 &
CHURN=$!
sleep 8
nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader
timeout 40 $D/sampler4 --bench --compositions --configs fast-every-tick,fast-adaptive --seconds 8 --interval-ms 100 --out "$R/compositions-churn.json"; echo "rc=$?"
timeout 40 $D/sampler4 --bench --configs tiers --seconds 25 --interval-ms 100 --out "$R/bench-100ms-churn.json"; echo "rc=$?"
kill $CHURN $HOLD 2>/dev/null; wait $CHURN $HOLD 2>/dev/null
date -u
