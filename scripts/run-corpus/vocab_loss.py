"""A language-model head over a large vocabulary: the logits of every token, their log-softmax
and its gradient are each as large as the batch, and the step runs out at the loss, after the
forward pass. `--loss-chunks N` computes the loss over N slices of the tokens, recomputing each
slice's logits in the backward pass.

    python3 vocab_loss.py --cap-gib G [--loss-chunks 1] [--batch-size 8] [--steps 12]

The batch is `--batch-size` sequences of 1024 tokens.
"""

import argparse
import json
import time

import torch
from gpu_size import limit_memory
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--loss-chunks", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

vocab, hidden, tokens = 50304, 1024, args.batch_size * 1024
body = torch.nn.Sequential(torch.nn.Embedding(vocab, hidden), torch.nn.Linear(hidden, hidden),
                           torch.nn.GELU()).cuda()
lm_head = torch.nn.Linear(hidden, vocab, bias=False).cuda()
optimizer = torch.optim.AdamW(list(body.parameters()) + list(lm_head.parameters()), lr=1e-4)


def slice_loss(h, targets):
    return torch.nn.functional.cross_entropy(lm_head(h), targets, reduction="sum")


for step in range(args.steps):
    ids = torch.randint(0, vocab, (tokens,), device="cuda")
    targets = torch.randint(0, vocab, (tokens,), device="cuda")
    h = body(ids)
    if args.loss_chunks <= 1:
        loss = slice_loss(h, targets) / tokens
    else:
        loss = sum(checkpoint(slice_loss, hc, tc, use_reentrant=False)
                   for hc, tc in zip(h.chunk(args.loss_chunks), targets.chunk(args.loss_chunks))) / tokens
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
