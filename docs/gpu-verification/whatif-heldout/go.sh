set -x
R=$OUT/heldout; mkdir -p $R
cd .device/heldout
python3 make_ground_truth.py $R/gt --module workloads_heldout --jobs 12 > $R/log.txt 2>&1
tail -25 $R/log.txt
mv $R/gt/*.tar.xz $R/
for f in $R/gt/runs/*.failed.txt; do [ -e "$f" ] && { echo "== $f"; tail -30 "$f"; }; done
rm -rf $R/gt
ls -la $R
