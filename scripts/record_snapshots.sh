#!/bin/bash
# Records the real snapshots in tests/fixtures/pytorch on a CUDA machine with PyTorch (took 38 s on
# an H200, PyTorch 2.11). Writes $OUT/snaps.tgz; unpack it into tests/fixtures/pytorch and run
# scripts/snapshot_expect.py on the new files.
# One device call: every scenario in its own process (allocator settings are per process).
set -u
S=${S:-scripts}
W=/tmp/snaps; mkdir -p $W/out $W/build_cpp
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0)); print([n for n in dir(torch._C) if "napshot" in n])' > $W/out/env.txt 2>&1
for s in streams oom leak graphs nohistory; do
  timeout 120 python3 $S/record_snapshots.py $s $W/out > $W/out/log_$s.txt 2>&1 &
done
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 python3 $S/record_snapshots.py expandable $W/out > $W/out/log_expandable.txt 2>&1 &
PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:100,roundup_power2_divisions:4 timeout 120 python3 $S/record_snapshots.py maxsplit $W/out > $W/out/log_maxsplit.txt 2>&1 &
MAX_JOBS=16 timeout 200 python3 $S/record_snapshots.py cpp $W/out > $W/out/log_cpp.txt 2>&1 &
wait
ls -la $W/out
tail -n 3 $W/out/log_*.txt
tar czf $OUT/snaps.tgz -C $W out
ls -la $OUT
