#!/usr/bin/env bash
# Idle CPU of the vramscope window (docs/benchmarks.md, "Idle CPU of the GUI").
# Usage, on a machine without a display:
#   xvfb-run -a -s "-screen 0 1400x900x24" benches/idle_cpu.sh [vramscope arguments…]
# Starts target/debug/vramscope with the arguments, waits 10 s, then reports the CPU time the
# process and each of its threads used during the next 30 s, and stops the app.
set -euo pipefail
cd "$(dirname "$0")/.."
state_dir=$(mktemp -d)
export XDG_DATA_HOME="$state_dir/data" XDG_RUNTIME_DIR="$state_dir/run"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
target/debug/vramscope "$@" >"$state_dir/app.log" 2>&1 &
app=$!
sleep 10
ticks() { awk '{print $14 + $15}' "$1"; }
snapshot() {
    echo "process $(ticks /proc/$app/stat)"
    for task in /proc/$app/task/*; do echo "$(tr ' ' '_' <"$task/comm")/${task##*/} $(ticks "$task/stat")"; done
}
snapshot | sort >"$state_dir/before"
sleep 30
snapshot | sort >"$state_dir/after"
hz=$(getconf CLK_TCK)
echo "CPU seconds used in 30 s by: $*"
join "$state_dir/before" "$state_dir/after" | awk -v hz="$hz" '{ printf "  %-28s %6.2f s\n", $1, ($3 - $2) / hz }'
kill "$app"
wait "$app" || true
rm -rf "$state_dir"
