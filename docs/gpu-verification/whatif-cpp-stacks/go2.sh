# 2026-12-02, second call: unet_segment under the 1415 MiB cap with C++ stacks, with cuDNN's
# benchmark search (try_plans) and with the v8 API switched off (v7's AlgoIterator::try_all),
# to see which frames the caught workspace failures carry there.
set -x
R=$OUT/cpp2; mkdir -p $R
cd .device/cppstacks
export VRAMSCOPE_STACKS=all VRAMSCOPE_WORKLOADS=workloads_heldout2
VRAMSCOPE_CUDNN_BENCHMARK=1 python3 run_case.py unet_segment 1483735040 1.0 $R/unet_segment__benchmark__cap1483735040
TORCH_CUDNN_V8_API_DISABLED=1 python3 run_case.py unet_segment 1483735040 1.0 $R/unet_segment__v7__cap1483735040
python3 - $R <<'PY'
import collections, pickle, sys, glob
for p in sorted(glob.glob(sys.argv[1] + "/*.pickle")):
    t = pickle.load(open(p, "rb"))["device_traces"][0]
    c = collections.Counter()
    for e in t:
        if e["action"] == "oom":
            c[tuple(f["name"].split("(")[0][:80] for f in e["frames"] if "at::native" in f["name"])[:4]] += 1
    print(p, len(t), dict(c))
PY
cd $R && tar cJf $OUT/cpp2.tar.xz * && ls -la $OUT
