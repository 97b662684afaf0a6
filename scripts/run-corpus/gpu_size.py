"""Makes a corpus program see a smaller GPU: `limit_memory(cap_gib)` leaves it about `cap_gib`
GiB of device memory (issue 32, 35; docs/run-validation.md).

Two ways, chosen by CORPUS_LIMIT (or `how`):

* ``ballast`` (default): the program's process takes all free device memory but `cap_gib` (and
  a fixed reserve for CUDA's own lazily loaded kernels) with one cuMemAlloc, outside PyTorch's
  allocator. PyTorch then runs out as on a card that is that much smaller: the device is full,
  no per-process cap is set, and the allocator's view (free memory, its OOM message) is that of
  a whole card. The ballast shows as non-PyTorch memory of the process.
* ``cap``: torch.cuda.set_per_process_memory_fraction, a cap the allocator enforces while the
  card has room (what a user sharing a GPU sets; the doctor then rightly names the cap).
"""

import ctypes
import os

import torch

# CUDA loads kernel modules lazily (CUDA_MODULE_LOADING=LAZY) from the same device memory: a
# ballast that left exactly the cap would make a later kernel load fail outside the allocator.
RESERVE_BYTES = 512 << 20

_ballast = []  # keeps the ballast's pointer for the process's life


def limit_memory(cap_gib, how=None):
    if cap_gib <= 0:
        return
    how = how or os.environ.get("CORPUS_LIMIT", "ballast")
    if how == "cap":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gib * 2**30 / total))
        return
    if how != "ballast":
        raise SystemExit(f"CORPUS_LIMIT={how!r} is not ballast or cap")
    free, _ = torch.cuda.mem_get_info()  # initialises CUDA: the primary context is current
    size = free - int(cap_gib * 2**30) - RESERVE_BYTES
    if size <= 0:
        return
    libcuda = ctypes.CDLL("libcuda.so.1")
    pointer = ctypes.c_uint64()
    status = libcuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size))
    if status != 0:
        raise SystemExit(f"gpu_size: cuMemAlloc of {size} bytes failed with CUDA error {status}")
    _ballast.append(pointer)
