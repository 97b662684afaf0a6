#!/usr/bin/env bash
# Unpacks one device call's archive of the run corpus into docs/gpu-verification/run-corpus/
# (docs/run-validation.md): results-<UTC time>-<first case>.json, calibration-<…>.json and the
# call's log, named by the time the call started (so that by name a later call comes later: a case
# run again counts by its latest run), and per case its evidence (run.json, report.json, doctor.json, output.log, the OOM
# snapshots, the timeline, vramscope.log: what vramscope printed). report.html is left out: it
# is made again from report.json by `vramscope`. A case that ran again replaces its folder.
#   bash scripts/run-corpus/unpack.sh corpus-calibrate-feature_history.tar.xz
set -euo pipefail
archive=$1
dest=$(cd "$(dirname "$0")/../.." && pwd)/docs/gpu-verification/run-corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xJf "$archive"
results=$(ls "$tmp"/results-*.json)
first=$(basename "$results" .json); first=${first#results-}
mode=$(ls "$tmp"/corpus-*.log | head -1); mode=$(basename "$mode" .log); mode=${mode#corpus-}
started=$(date -u -d "$(head -1 "$tmp/corpus-$mode.log")" +%Y%m%dT%H%MZ)
mkdir -p "$dest"
cp "$results" "$dest/results-$started-$first.json"
[ -f "$tmp/calibration.json" ] && cp "$tmp/calibration.json" "$dest/calibration-$started-$first.json"
cp "$tmp/corpus-$mode.log" "$dest/corpus-$mode-$started-$first.log"
for log in "$tmp"/*.vramscope.log; do
  case=$(basename "$log" .vramscope.log)
  [ -d "$tmp/$case" ] || continue
  rm -rf "${dest:?}/$case"
  mkdir -p "$dest/$case"
  find "$tmp/$case" -maxdepth 1 -type f ! -name report.html -exec cp {} "$dest/$case/" \;
  cp "$log" "$dest/$case/vramscope.log"
  echo "$case"
done
