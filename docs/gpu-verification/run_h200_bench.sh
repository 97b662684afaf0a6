#!/usr/bin/env bash
# Third device call: the sampler benchmark with a PyTorch process on the GPU (so that process
# lists are not empty), after the single-call process lists; process list checked against
# nvidia-smi; per-call profile; 10 Hz (both configurations) and 4 Hz (app default, tiers).
set -u
D=.device/nvml
R=/tmp/results
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
exec > >(tee "$OUT/run.log") 2>&1
finish() { (cd /tmp && tar czf "$OUT/results.tar.gz" results); }
trap finish EXIT
date -u; uname -r; nvidia-smi -L
python3 $D/hold.py 8 240 &
HOLD=$!
sleep 12
echo "== process list: vramscope info vs nvidia-smi"
timeout 60 $D/vramscope info --json > "$R/info.json"; echo "rc=$?"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("vramscope", p["pid"], p["name"], p["kind"], p["used_bytes"] // 2**20, "MiB") for g in d["devices"] for p in g["processes"]]' "$R/info.json"
nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader
echo "== benchmark 10 Hz"
timeout 200 $D/sampler --bench --profile-calls --seconds 25 --interval-ms 100 --out "$R/bench-100ms.json"; echo "rc=$?"
echo "== benchmark 4 Hz (the app's default fast interval), tiers"
timeout 100 $D/sampler --bench --seconds 20 --interval-ms 250 --configs tiers --out "$R/bench-250ms.json"; echo "rc=$?"
kill $HOLD; wait $HOLD 2>/dev/null
