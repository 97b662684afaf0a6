#!/usr/bin/env bash
# One device call: vramscope info, the sampler benchmark, and the recording comparison.
# Run from the repository root with the binaries in .device/nvml/ (see docs/gpu-verification.md).
# Everything printed goes to $OUT/run.log; the raw files come back in $OUT/results.tar.gz.
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
nvidia-smi --query-gpu=driver_version,name,memory.total,persistence_mode --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
ldd $D/vramscope | grep "not found" || echo "ldd: all libraries found"

echo "== vramscope info"
timeout 60 $D/vramscope info; echo "rc=$?"
echo "== vramscope info --json"
timeout 60 $D/vramscope info --json | tee "$R/info.json"; echo "rc=${PIPESTATUS[0]}"

echo "== sampler benchmark: 10 Hz, 20 s per configuration, nvidia-smi -lms 100 alongside"
timeout 150 $D/sampler --bench --seconds 20 --interval-ms 100 --out "$R/bench.json"; echo "rc=$?"

echo "== recording comparison"
APPS=timestamp,pid,name,used_memory
nvidia-smi --query-compute-apps=$APPS --format=csv >/dev/null 2>&1 || APPS=timestamp,pid,process_name,used_gpu_memory
echo "compute-apps fields: $APPS"
nvidia-smi --query-gpu=timestamp,memory.used,memory.reserved,memory.total --format=csv -lms 250 > "$R/smi-memory.csv" &
SMI_MEMORY=$!
nvidia-smi --query-compute-apps=$APPS --format=csv -lms 250 > "$R/smi-apps.csv" &
SMI_APPS=$!
timeout 80 $D/vramscope record --out "$R/run.vramcap" --interval-ms 250 --duration 40 > "$R/record.log" 2>&1 &
RECORD=$!
timeout 80 $D/sampler --record-csv "$R/csv" --interval-ms 250 --seconds 40 &
CSV=$!
sleep 3
timeout 120 python3 $D/alloc_steps.py cuda:0 | tee "$R/alloc.log"
wait $RECORD; echo "record rc=$?"; tail -c 400 "$R/record.log"; echo
wait $CSV; echo "csv rc=$?"
kill $SMI_MEMORY $SMI_APPS; wait $SMI_MEMORY $SMI_APPS 2>/dev/null
timeout 60 $D/vramscope inspect "$R/run.vramcap"; echo "rc=$?"
timeout 60 $D/vramscope inspect --json "$R/run.vramcap" > "$R/inspect.json"; echo "rc=$?"
timeout 60 $D/sampler --capture-csv "$R/run.vramcap" --csv-dir "$R/rec"; echo "rc=$?"
wc -l "$R"/*.csv "$R"/rec/*.csv "$R"/csv/*.csv
echo "== compare: vramscope record vs nvidia-smi"
python3 $D/compare.py "$R" "$(date +%z)"
echo "== compare: sampler CSV vs nvidia-smi"
mkdir -p /tmp/csvcmp/rec && cp "$R"/smi-*.csv /tmp/csvcmp/ && cp "$R"/csv/*.csv /tmp/csvcmp/rec/
python3 $D/compare.py /tmp/csvcmp "$(date +%z)"
