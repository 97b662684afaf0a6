#!/usr/bin/env bash
# Device call on a host with two H200s: both devices in `vramscope info`, a process on each
# recorded by `vramscope record`, the per-call cost profile and the sampler benchmark.
set -u
D=.device/nvml
R=/tmp/results
mkdir -p "$R"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
exec > >(tee "$OUT/run.log") 2>&1
finish() { (cd /tmp && tar czf "$OUT/results.tar.gz" results); }
trap finish EXIT

echo "== environment"
date -u; echo "utc_offset $(date +%z)"; uname -r
nvidia-smi -L
nvidia-smi --query-gpu=index,driver_version,name,memory.total,persistence_mode --format=csv
echo "== vramscope info (idle)"
timeout 60 $D/vramscope info; echo "rc=$?"

echo "== two processes, one per GPU, recorded"
timeout 60 $D/vramscope record --out "$R/x2.vramcap" --interval-ms 250 --duration 32 > "$R/record.log" 2>&1 &
RECORD=$!
nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,name,used_memory --format=csv -lms 250 > "$R/smi-apps.csv" &
SMI_APPS=$!
sleep 2
timeout 90 python3 $D/alloc_steps.py cuda:0 > "$R/alloc0.log" &
A0=$!
timeout 90 python3 $D/alloc_steps.py cuda:1 > "$R/alloc1.log" &
A1=$!
sleep 9
echo "== vramscope info (both jobs running)"
timeout 60 $D/vramscope info; echo "rc=$?"
timeout 60 $D/vramscope info --json > "$R/info-busy.json"; echo "rc=$?"
nvidia-smi
wait $A0 $A1
wait $RECORD; echo "record rc=$?"; tail -c 300 "$R/record.log"; echo
kill $SMI_APPS; wait $SMI_APPS 2>/dev/null
timeout 60 $D/vramscope inspect "$R/x2.vramcap"; echo "rc=$?"
timeout 60 $D/vramscope inspect --json "$R/x2.vramcap" > "$R/inspect.json"; echo "rc=$?"
timeout 60 $D/sampler --capture-csv "$R/x2.vramcap" --csv-dir "$R/rec"; echo "rc=$?"
cut -d, -f2-4 "$R/smi-apps.csv" | sort | uniq -c | sort -rn | head -5

echo "== per-call cost profile and sampler benchmark (2 GPUs): 10 Hz, 30 s per configuration"
timeout 200 $D/sampler --bench --profile-calls --seconds 30 --interval-ms 100 --out "$R/bench.json"; echo "rc=$?"
