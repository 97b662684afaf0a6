"""Step time of a real training loop (a 12-layer transformer encoder, bf16 autocast, AdamW), for
the cost of recording allocator history under `vramscope run` (issue 32). Prints one JSON line:
median and mean step time over the timed steps, after warm-up.

    python3 scripts/run/step_time.py [STEPS] [BATCH]
"""

import json
import os
import statistics
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16
layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
net = torch.nn.TransformerEncoder(layer, num_layers=12).cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
times = []
for i in range(steps + 5):
    torch.cuda.synchronize()
    started = time.perf_counter()
    x = torch.randn(batch, 512, 1024, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = net(x).float().square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if i >= 5:
        times.append(time.perf_counter() - started)
print(json.dumps({
    "stacks": os.environ.get("VRAMSCOPE_RUN_STACKS", "off" if "VRAMSCOPE_RUN_DIR" not in os.environ else "python"),
    "steps": steps,
    "batch": batch,
    "median_ms": 1000 * statistics.median(times),
    "mean_ms": 1000 * statistics.mean(times),
    "history_enabled": bool(torch._C._cuda_isHistoryEnabled()) if hasattr(torch._C, "_cuda_isHistoryEnabled") else None,
}), flush=True)
