"""A training job with no vramscope code in it that runs out of memory under a cap: run under the
`vramscope run` hook (assets/python/vramscope_run on PYTHONPATH) it must leave an OOM snapshot and
record, and CUDA must not be initialised by the hook before the program's own first CUDA call.

    python3 scripts/run/oom_job.py   # prints JSON lines: init state after import, the OOM
"""

import json
import sys

import torch

print(json.dumps({"cuda_initialized_after_import": torch.cuda.is_initialized()}), flush=True)

torch.cuda.set_per_process_memory_fraction(0.02)  # about 2.8 GiB of an H200, 1.6 GiB of an H100
net = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda()
optimizer = torch.optim.Adam(net.parameters())
kept = []
try:
    for step in range(1000):
        x = torch.randn(1024, 2048, device="cuda")
        loss = net(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # grows 64 MiB a step
except torch.OutOfMemoryError as error:
    print(json.dumps({"oom_at_step": step, "message": str(error).splitlines()[0]}), flush=True)
    sys.exit(1)
