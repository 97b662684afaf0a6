"""Changes GPU memory every ~0.5 s for a while: allocates 1 GiB, then frees it and empties the
caching allocator's cache (so that NVML sees the drop), alternately. Used by run_h200_bench4.sh
to measure the adaptive process lists when device memory keeps changing.
"""

import sys
import time

import torch

GIB = 1 << 30
PERIOD_S = 0.5

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90
device = torch.device("cuda:0")
torch.zeros(1, device=device)
print(f"changing memory on cuda:0 every {PERIOD_S} s for {seconds:.0f} s", flush=True)
changes = 0
held = None
end = time.monotonic() + seconds
while time.monotonic() < end:
    if held is None:
        held = torch.empty(GIB, dtype=torch.uint8, device=device)
        held.fill_(1)
    else:
        held = None
        torch.cuda.empty_cache()
    torch.cuda.synchronize(device)
    changes += 1
    time.sleep(PERIOD_S)
print(f"{changes} memory changes", flush=True)
