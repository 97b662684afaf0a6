#!/usr/bin/env bash
# nvidia-smi CSV logs read as captures, checked against vramscope's own recording on a real GPU.
#
#   bash docs/gpu-verification/smi_formats.sh [VRAMSCOPE_BINARY] [OUT_DIR]
#
# Logs the GPUs for 20 s with nvidia-smi in five formats (full header and units; noheader,nounits;
# fields reversed with nounits; -l 1; --query-compute-apps) while `vramscope record` records the
# same GPUs, optionally with PyTorch allocating on GPU 0, then checks with `vramscope inspect
# --json` and `vramscope export --csv` that every log opens as a capture with every GPU, the
# right interval, used memory within 1 MiB of the recording at the same instant, and the same
# processes. Prints PASS or FAIL per check; exits 1 if any check fails.
set -u
BIN=${1:-target/release/vramscope}
R=${2:-/tmp/smi-formats}
rm -rf "$R" && mkdir -p "$R"
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
echo "GPUs: $GPUS; utc offset $(date +%z); $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"

"$BIN" record --out "$R/run.vramcap" --interval-ms 250 --duration 20 > "$R/record.log" 2>&1 &
REC=$!
Q=timestamp,index,uuid,name,memory.total,memory.reserved,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw
nvidia-smi --query-gpu=$Q --format=csv -lms 250 > "$R/full.csv" & P1=$!
nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv,noheader,nounits -lms 250 > "$R/noheader.csv" & P2=$!
nvidia-smi --query-gpu=memory.total,memory.used,index,timestamp --format=csv,nounits -lms 250 > "$R/reversed.csv" & P3=$!
nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 1 > "$R/seconds.csv" & P4=$!
nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv -lms 250 > "$R/apps.csv" & P5=$!
sleep 2
python3 - <<'PY' 2>/dev/null || echo "(no PyTorch: memory stays as it is)"
import time, torch
blocks = []
for _ in range(8):
    blocks.append(torch.empty(512 << 20, dtype=torch.uint8, device="cuda:0"))
    time.sleep(1)
time.sleep(4)
PY
wait $REC
kill $P1 $P2 $P3 $P4 $P5; wait $P1 $P2 $P3 $P4 $P5 2>/dev/null

for f in full noheader reversed seconds; do
  "$BIN" inspect --json "$R/$f.csv" > "$R/$f.inspect.json" || echo "FAIL inspect $f.csv"
done
"$BIN" inspect --json "$R/full.csv" "$R/apps.csv" > "$R/joined.inspect.json" || echo "FAIL inspect full.csv apps.csv"
"$BIN" export "$R/run.vramcap" --csv "$R/rec.csv" --force > /dev/null || echo "FAIL export run.vramcap"
for f in full noheader reversed seconds; do
  "$BIN" export "$R/$f.csv" --csv "$R/$f.export.csv" --force > /dev/null || echo "FAIL export $f.csv"
done

python3 - "$R" "$GPUS" <<'PY'
import csv, json, sys
R, gpus = sys.argv[1], int(sys.argv[2])
MIB = 1 << 20
failed = 0
def check(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed += not ok
def table(path):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)]
rec = {}
for r in table(f"{R}/rec.csv"):
    if r["used_bytes"]:
        rec.setdefault(int(r["gpu"]), []).append((int(r["unix_ms"]), int(r["used_bytes"])))
for name, interval in [("full", 250), ("noheader", 250), ("reversed", 250), ("seconds", 1000)]:
    doc = json.load(open(f"{R}/{name}.inspect.json"))
    check(len(doc["devices"]) == gpus, f"{name}.csv: {len(doc['devices'])} GPUs of {gpus}")
    check(abs(doc["interval_ms"] - interval) <= interval * 0.2, f"{name}.csv: interval {doc['interval_ms']} ms (-lms/-l {interval})")
    worst, pairs = 0, 0
    for r in table(f"{R}/{name}.export.csv"):
        samples = rec.get(int(r["gpu"]), [])
        if not samples or not r["used_bytes"]:
            continue
        t = int(r["unix_ms"])
        near = min(samples, key=lambda s: abs(s[0] - t))
        if abs(near[0] - t) <= 125:
            pairs += 1
            worst = max(worst, abs(near[1] - int(r["used_bytes"])))
    check(pairs > 10 and worst <= MIB, f"{name}.csv: {pairs} samples paired with the recording, worst used difference {worst / MIB:.2f} MiB")
joined = json.load(open(f"{R}/joined.inspect.json"))
apps_pids = sorted({int(r["pid"]) for r in csv.DictReader(open(f"{R}/apps.csv"), skipinitialspace=True) if r.get("pid", "").strip().isdigit()})
joined_pids = sorted({p["pid"] for p in joined["processes"]})
check(joined_pids == apps_pids, f"apps.csv joined to full.csv: pids {joined_pids} (nvidia-smi listed {apps_pids})")
print("FAILED" if failed else "ALL PASSED")
sys.exit(1 if failed else 0)
PY
