# Re-runs, for real, the held-out diagnoses' recommended settings the ground truth did not cover.
R=$OUT/recheck; mkdir -p $R
cd .device/recheck
export VRAMSCOPE_WORKLOADS=workloads_heldout
run() { # workload conf cap
  tag=$(echo "$2" | sed 's/[^A-Za-z0-9]/_/g')
  PYTORCH_CUDA_ALLOC_CONF="$2" python3 run_case.py $1 $3 1.0 $R/$1__${tag}__cap$3 > $R/$1__${tag}__cap$3.out 2>&1 &
}
run random_lifetimes max_split_size_mb:32 1784676352
run random_lifetimes garbage_collection_threshold:0.8 1784676352
run mlp_grad_accum max_split_size_mb:128 2236612608
run mlp_grad_accum max_split_size_mb:256 2236612608
run mlp_grad_accum max_split_size_mb:128 2239758336
run mlp_grad_accum max_split_size_mb:256 2239758336
run beam_search max_split_size_mb:20 269484032
run beam_search garbage_collection_threshold:0.8 269484032
run beam_search roundup_power2_divisions:8 269484032
wait
rm -f $R/*.pickle
for f in $R/*.json; do python3 -c "import json,sys; r=json.load(open('$f')); print(r['workload'], r['conf'], r['cap_bytes'], 'OOM' if r['oom'] else 'ran', r['reserved_peak_bytes']>>20, 'MiB')"; done
