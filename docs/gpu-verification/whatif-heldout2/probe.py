import sys
import torch
from torch.utils.checkpoint import checkpoint
reentrant, autocast = sys.argv[1] == "1", sys.argv[2] == "1"
torch.cuda.memory._record_memory_history(max_entries=200000, context="all", stacks="python")
d = 512
layers = torch.nn.ModuleList(torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True) for _ in range(2)).cuda()
try:
    for seq in (128, 256):
        x = torch.randn(4, seq, d, device="cuda", requires_grad=reentrant)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            h = x
            for layer in layers:
                h = checkpoint(layer, h, use_reentrant=reentrant)
            loss = h.float().square().mean()
        loss.backward()
    print("OK", sys.argv[1], sys.argv[2])
except Exception as e:
    print("FAIL", sys.argv[1], sys.argv[2], type(e).__name__, str(e)[:200])
