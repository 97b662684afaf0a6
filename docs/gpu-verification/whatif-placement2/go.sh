# 24 more real runs of the one ground-truth pair whose real runs disagreed (2026-12-03):
# transformer_step under garbage_collection_threshold:0.6 with the 3355 MiB cap (6 of 7 ran out),
# 12 processes at a time, as the ground truth was made. Device, repository root.
set -x
R=$OUT/placement2; mkdir -p $R
K=.device/rep3; mkdir -p $K
cp scripts/whatif/repeat_runs.py scripts/whatif/run_case.py scripts/whatif/workloads.py tests/fixtures/whatif/truth.json $K/
cd $K
python3 repeat_runs.py truth.json $R/gt --parallel 24 --jobs 12 --sequential 0 \
 transformer_step__garbage_collection_threshold_0_6__cap3517972480 > $R/log.txt 2>&1
tail -40 $R/log.txt
rm -rf $R/gt/runs
ls -la $R $R/gt
