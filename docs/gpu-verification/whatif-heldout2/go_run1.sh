# First run (2026-12-02 12:16 UTC): the ground truth of scripts/whatif/workloads_heldout2.py.
# Kit: .device/heldout2/ = make_ground_truth.py run_case.py workloads_heldout2.py (copies).
set -x
R=$OUT/h2; mkdir -p $R
cd .device/heldout2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > gpu.txt
python3 -c "import torch; print(torch.__version__)" >> gpu.txt
python3 make_ground_truth.py gt --module workloads_heldout2 --jobs 12 > log.txt 2>&1
tail -40 log.txt
for f in gt/runs/*.failed.txt; do [ -e "$f" ] && { echo "== $f"; tail -30 "$f"; }; done
mv gt/*.tar.xz $R/
tar cJf $R/meta.tar.xz gpu.txt log.txt gt/summary.json
ls -la $R
