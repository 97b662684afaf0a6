set -x
nvidia-smi --query-gpu=name,memory.used --format=csv
# Run on the device from the repository root with the scripts of scripts/whatif and the two
# truth.json files copied into .device/rep2 (truth.json, heldout_truth.json).
R=$OUT/placement; mkdir -p $R
cd .device/rep2
date
python3 repeat_runs.py truth.json $R/gt --parallel 5 --jobs 12 --sequential 1 \
 transformer_step__garbage_collection_threshold_0_6__cap3515875328 transformer_step__garbage_collection_threshold_0_6__cap3517972480 \
 transformer_step__roundup_power2_divisions_4__cap3515875328 transformer_step__roundup_power2_divisions_4__cap3517972480 \
 small_churn__roundup_power2_divisions_4__cap244318208 > $R/gt_log.txt 2>&1
date
VRAMSCOPE_WORKLOADS=workloads_heldout python3 repeat_runs.py heldout_truth.json $R/ho --parallel 5 --jobs 12 --sequential 1 \
 random_lifetimes__roundup_power2_divisions_4__cap1972371456 > $R/ho_log.txt 2>&1
date
cat $R/gt_log.txt $R/ho_log.txt
rm -rf $R/gt/runs $R/ho/runs
cd $R && tar cJf $OUT/placement.tar.xz gt ho gt_log.txt ho_log.txt && ls -la $OUT
