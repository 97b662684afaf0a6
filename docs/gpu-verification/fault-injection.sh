#!/usr/bin/env bash
# Fault injection on a real NVIDIA GPU (needs the driver; run from the repository root):
#
#   bash docs/gpu-verification/fault-injection.sh [BINARY]
#
# BINARY is a prebuilt vramscope (for a GPU machine without a Rust toolchain; xz-compressed is
# fine); without it the script builds one with `cargo build --release`.
#
# Records GPU 0 through NVML for 9 s while VRAMSCOPE_FAULTS makes its temperature reads fail
# (1-3 s), loses the GPU (2-5 s) and blocks one poll for 1 s (at 6 s), then checks the capture:
# one device_lost and one device_returned event on GPU 0, and a cleanly closed file (recording
# went on through all three). Prints PASS or FAIL.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ $# -ge 1 ]; then
    case "$1" in
        *.xz) xz -dc "$1" > "$dir/vramscope" ;;
        *) cp "$1" "$dir/vramscope" ;;
    esac
    chmod +x "$dir/vramscope"
    vramscope="$dir/vramscope"
else
    cargo build --release --quiet
    vramscope=target/release/vramscope
fi
VRAMSCOPE_FAULTS="fail gpu=0 field=temperature at=1s for=2s; lost gpu=0 at=2s for=3s; hang gpu=0 at=6s for=1s" \
    "$vramscope" record -o "$dir/faults.vramcap" --duration 9 --interval-ms 100
"$vramscope" inspect --json "$dir/faults.vramcap" > "$dir/faults.json"
python3 - "$dir/faults.json" <<'PY'
import json, sys
capture = json.load(open(sys.argv[1]))
events = [e for e in capture["events"] if e["device_index"] == 0]
kinds = [e["kind"] for e in events if e["kind"] in ("device_lost", "device_returned")]
problems = []
if kinds != ["device_lost", "device_returned"]:
    problems.append(f"expected one loss and one return on GPU 0, got {kinds}")
if capture.get("recovery") is not None:
    problems.append(f"the file needed recovery: {capture['recovery']}")
print("events on GPU 0:", [(e["kind"], e["t_ms"]) for e in events])
print("FAIL: " + "; ".join(problems) if problems else "PASS")
sys.exit(1 if problems else 0)
PY
