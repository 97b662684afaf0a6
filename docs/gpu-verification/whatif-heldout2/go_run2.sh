# Second run: which checkpoint variant runs with the history recorded, the ckpt_transformer
# ground truth under it, then the doctor on every OOM run of the set, its proven settings re-run.
set -x
R=$OUT/h2b; mkdir -p $R
cd .device/heldout2
xz -d -f vramscope.xz && chmod +x vramscope
for r in 0 1; do for a in 1 0; do python3 probe.py $r $a > probe_$r$a.txt 2>&1 & done; done; wait
cat probe_*.txt | grep -E "^(OK|FAIL)" | tee probe.txt
V=""
for v in "0 1" "1 1" "0 0" "1 0"; do set -- $v; if grep -q "^OK $1 $2$" probe.txt; then V="$1 $2"; break; fi; done
echo "variant (reentrant autocast): $V" | tee ckpt_variant.txt
set -- $V
export VRAMSCOPE_CKPT_REENTRANT=${1:-0} VRAMSCOPE_CKPT_AUTOCAST=${2:-1}
python3 make_ground_truth.py gt --module workloads_heldout2 --workloads ckpt_transformer --jobs 12 > log_ckpt.txt 2>&1
tail -25 log_ckpt.txt
for f in gt/runs/*.failed.txt; do [ -e "$f" ] && { echo "== $f"; tail -12 "$f"; }; done
python3 doctor_recheck.py prev ./vramscope workloads_heldout2 doctor_prev.json --jobs 12 > doctor_prev.txt 2>&1
cat doctor_prev.txt
python3 doctor_recheck.py gt ./vramscope workloads_heldout2 doctor_ckpt.json --jobs 12 > doctor_ckpt.txt 2>&1
cat doctor_ckpt.txt
mv gt/*.tar.xz $R/
tar cJf $R/meta2.tar.xz probe.txt ckpt_variant.txt log_ckpt.txt doctor_*.json doctor_*.txt prev/recheck gt/recheck gt/summary.json
ls -la $R
