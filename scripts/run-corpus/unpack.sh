#!/usr/bin/env bash
# Unpacks one device call's archive of the run corpus into docs/gpu-verification/run-corpus/
# (docs/run-validation.md): results-<UTC time>-<first case>.json, calibration-<…>.json and the
# call's log, named by the time the call started (so that by name a later call comes later: a case
# run again counts by its latest run), and per case its evidence (run.json, report.json, doctor.json
# (each xz-compressed when over 1 MiB), output.log, the OOM
# snapshots, the timeline, vramscope.log: what vramscope printed). report.html is left out: it
# is made again from report.json by `vramscope`. A case that ran again replaces its folder.
#   bash scripts/run-corpus/unpack.sh corpus-calibrate-feature_history.tar.xz
set -euo pipefail
archive=$1
dest=$(cd "$(dirname "$0")/../.." && pwd)/docs/gpu-verification/run-corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xJf "$archive"
# The archive is named after the call's mode and first case (gpu_corpus.sh); a warm machine
# keeps its work folder between calls, so only that call's results and cases are taken.
name=$(basename "$archive" .tar.xz); name=${name#corpus-}
mode=${name%%-*}; first=${name#*-}
results="$tmp/results-$first.json"
[ -f "$results" ] || { echo "unpack: no results-$first.json in $archive" >&2; exit 1; }
started=$(date -u -d "$(head -1 "$tmp/corpus-$mode.log")" +%Y%m%dT%H%MZ)
mkdir -p "$dest"
cp "$results" "$dest/results-$started-$first.json"
[ -f "$tmp/calibration.json" ] && cp "$tmp/calibration.json" "$dest/calibration-$started-$first.json"
cp "$tmp/corpus-$mode.log" "$dest/corpus-$mode-$started-$first.log"
for case in $(python3 -c 'import json, sys; print(" ".join(c["case"] for c in json.load(open(sys.argv[1])) if "error" not in c))' "$results"); do
  [ -d "$tmp/$case" ] || continue
  rm -rf "${dest:?}/$case"
  mkdir -p "$dest/$case"
  find "$tmp/$case" -maxdepth 1 -type f ! -name report.html -exec cp {} "$dest/$case/" \;
  cp "$tmp/$case.vramscope.log" "$dest/$case/vramscope.log"
  # A job that wrote hundreds of OOM snapshots (cuDNN retrying) makes JSON of several MB, which
  # compresses to a few percent: kept as .json.xz (`xz -dk` before opening the folder).
  for json in "$dest/$case/doctor.json" "$dest/$case/report.json"; do
    [ -f "$json" ] && [ "$(stat -c %s "$json")" -gt 1048576 ] && xz -9 -f "$json"
  done
  echo "$case"
done
