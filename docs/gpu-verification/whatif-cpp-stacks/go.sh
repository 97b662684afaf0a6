# 2026-12-02: the scratch-buffer workloads recorded with C++ stacks (stacks="all", what a bare
# torch.cuda.memory._record_memory_history() records), to see which frames a cuDNN convolution's
# workspace request carries. Kit: .device/cppstacks/ = run_case.py workloads*.py (copies).
set -x
R=$OUT/cpp; mkdir -p $R
cd .device/cppstacks
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" > $R/versions.txt
export VRAMSCOPE_STACKS=all
VRAMSCOPE_WORKLOADS=workloads_heldout2 python3 run_case.py unet_segment 0 1.0 $R/unet_segment__default__nocap
VRAMSCOPE_WORKLOADS=workloads_heldout2 python3 run_case.py unet_segment 1483735040 1.0 $R/unet_segment__default__cap1483735040
VRAMSCOPE_WORKLOADS=workloads_heldout python3 run_case.py cnn_train 0 1.0 $R/cnn_train__default__nocap
PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4 VRAMSCOPE_WORKLOADS=workloads_heldout \
  python3 run_case.py cnn_train 2134900736 1.0 $R/cnn_train__roundup_power2_divisions_4__cap2134900736
cd $R && tar cJf $OUT/cpp.tar.xz *.json *.pickle versions.txt && ls -la $R $OUT
