#!/bin/bash
# Lead's verification run on the H200: live capture helper + watcher input, diagnose on real data,
# a recorded leak capture.
set -x
cd "$(dirname "$0")/../.."
gunzip -c .device/lead/vramscope.gz > /tmp/vramscope && chmod +x /tmp/vramscope
V=/tmp/vramscope
mkdir -p /tmp/live $OUT/live
$V info > $OUT/live/info.txt 2>&1
# record while the job runs (the recording shows the leak and the OOM's process)
$V record --out /tmp/live/leak-run.vramcap --interval-ms 250 --duration 22 > $OUT/live/record.txt 2>&1 &
REC=$!
sleep 1
PYTHONUNBUFFERED=1 timeout 60 python3 .device/lead/live_job.py > /tmp/live/job.log 2>&1
echo "job exit $?" >> /tmp/live/job.log
wait $REC
ls -la /tmp/live/snapshots > $OUT/live/snapshots-ls.txt
$V inspect /tmp/live/leak-run.vramcap > $OUT/live/inspect.txt 2>&1
NEWEST=$(ls -t /tmp/live/snapshots/*periodic.pickle | head -1)
OOMSNAP=$(ls /tmp/live/snapshots/*oom*.pickle | head -1)
$V analyze "$OOMSNAP" > $OUT/live/analyze-oom.txt 2>&1
$V diagnose --log /tmp/live/job.log --snapshot "$OOMSNAP" --capture /tmp/live/leak-run.vramcap --report $OUT/live/report.html > $OUT/live/diagnose.txt 2>&1
$V diagnose --log /tmp/live/job.log --snapshot "$OOMSNAP" --capture /tmp/live/leak-run.vramcap --json > $OUT/live/diagnose.json 2>&1
$V diagnose --live --json > $OUT/live/diagnose-live.json 2>&1
cp /tmp/live/job.log $OUT/live/
mkdir -p /tmp/pack && cp /tmp/live/leak-run.vramcap "$OOMSNAP" "$NEWEST" /tmp/pack/ 2>/dev/null
tar czf $OUT/live/pack.tgz -C /tmp/pack .
ls -la $OUT/live
