# The ground truth of scripts/whatif/workloads_heldout4.py (2026-12-04, NVIDIA H200), with C++
# frames in the stacks (VRAMSCOPE_STACKS=all: what a bare _record_memory_history() records).
# Kit: .device/h4/ = make_ground_truth.py run_case.py workloads_heldout4.py (copies).
set -x
R=$OUT/h4; mkdir -p $R
K=.device/h4; mkdir -p $K
cp scripts/whatif/make_ground_truth.py scripts/whatif/run_case.py scripts/whatif/workloads_heldout4.py $K/
cd $K
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > gpu.txt
python3 -c "import torch; print(torch.__version__)" >> gpu.txt
export VRAMSCOPE_STACKS=all
timeout 540 python3 make_ground_truth.py gt --module workloads_heldout4 --jobs 12 > log.txt 2>&1
tail -70 log.txt
for f in gt/runs/*.failed.txt; do [ -e "$f" ] && { echo "== $f"; tail -30 "$f"; }; done
mv gt/*.tar.xz $R/
tar cJf $R/meta.tar.xz gpu.txt log.txt gt/summary.json
ls -la $R
