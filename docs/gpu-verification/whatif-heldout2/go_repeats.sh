# Repeats the second held-out set's uncertain pairs: 5 runs twelve at a time, 1 alone, each.
set -x
R=$OUT/rep3; mkdir -p $R
cd .device/rep3
export VRAMSCOPE_WORKLOADS=workloads_heldout2 VRAMSCOPE_CKPT_REENTRANT=1 VRAMSCOPE_CKPT_AUTOCAST=1
python3 repeat_runs.py truth.json out --parallel 5 --jobs 12 --sequential 1 \
  unet_segment__default__cap1483735040 \
  unet_segment__garbage_collection_threshold_0_6__cap1483735040 \
  unet_segment__max_split_size_mb_512__cap1483735040 \
  unet_segment__roundup_power2_divisions_4__cap1483735040 \
  unet_segment__roundup_power2_divisions_4__cap1630535680 \
  unet_segment__roundup_power2_divisions__256_1_512_2_1024_4___8__cap1483735040 \
  ckpt_transformer__max_split_size_mb_64__cap814743552 > log.txt 2>&1
tail -30 log.txt
cp out/summary.json $R/summary.json; cp log.txt $R/log.txt
ls -la $R
