set -x
nvidia-smi --query-gpu=name,memory.used --format=csv
R=$OUT/rep; mkdir -p $R
cd .device/rep
python3 repeat_runs.py truth.json $R --parallel 5 --jobs 12 --sequential 2 --sequential-prefix two_streams \
 kv_cache__roundup_power2_divisions_4__cap203423744 kv_cache__roundup_power2_divisions_4__cap241172480 kv_cache__roundup_power2_divisions_4__nocap \
 transformer_step__default__cap3515875328 transformer_step__default__cap3517972480 transformer_step__max_split_size_mb_512__cap3515875328 transformer_step__max_split_size_mb_512__cap3517972480 \
 transformer_step__roundup_power2_divisions__256_1_512_2_1024_4___8__cap3515875328 transformer_step__roundup_power2_divisions__256_1_512_2_1024_4___8__cap3517972480 \
 two_streams__expandable_segments_True__cap310378496 two_streams__expandable_segments_True__cap312475648 two_streams__garbage_collection_threshold_0_6__cap310378496 two_streams__garbage_collection_threshold_0_6__cap312475648 \
 kv_cache__default__nocap transformer_step__default__nocap two_streams__default__nocap > $R/log.txt 2>&1
tail -40 $R/log.txt
rm -rf $R/runs
ls -la $R
