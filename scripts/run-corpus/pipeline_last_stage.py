"""A language model (8 blocks of width 1024, a 128,256-token vocabulary, untied) trained with
two-stage pipeline parallelism, both stages as processes on one GPU under per-process memory caps
(`torch.cuda.set_per_process_memory_fraction`, set by the job as ranks sharing a card do), launched
like torchrun (RANK, LOCAL_RANK, WORLD_SIZE per process). The blocks are split evenly: rank 0 holds
the embedding and blocks 0-3, rank 1 blocks 4-7, the final norm and the output layer with the loss.
The stages exchange nothing here (each makes stand-in activations and gradients of the right
shape, where a pipeline would send and receive them), so each process does what its stage does.
Both stages hold a vocabulary-sized matrix, but only the last also makes the float32 logits of
every token of its micro-batch, their log-softmax and their gradients: rank 1 runs out while
rank 0 trains on. The launcher exits with the first failing rank's status.

    python3 pipeline_last_stage.py --cap-gib G [--micro-batch 8] [--seq-len 512] [--steps 10]
"""

import argparse
import json
import os
import sys
import time

from ranks import run_as_ranks  # never imports torch: the launcher stays off the GPU

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0, help="each process's cap in GiB (0: none)")
parser.add_argument("--micro-batch", type=int, default=8, help="sequences per micro-batch")
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--depth", type=int, default=8)
parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
args = parser.parse_args()

run_as_ranks(__file__, args.worker)

import torch  # noqa: E402  (the launcher itself never imports torch)
import torch.nn.functional as F  # noqa: E402
from gpu_size import limit_memory  # noqa: E402

rank = int(os.environ["RANK"])
started = time.time()
limit_memory(args.cap_gib, how="cap")
torch.manual_seed(rank)
torch.backends.cuda.matmul.allow_tf32 = True
vocab, d_model = 128256, 1024
first, last = rank == 0, rank == 1
stage_depth = args.depth // 2

with torch.device("cuda"):
    blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(d_model, 16, 4 * d_model, dropout=0.0,
                                                                   batch_first=True, norm_first=True)
                                  for _ in range(stage_depth)])
    embed = torch.nn.Embedding(vocab, d_model) if first else None
    final_norm = torch.nn.LayerNorm(d_model) if last else None
    head = torch.nn.Linear(d_model, vocab, bias=False) if last else None
modules = [m for m in (embed, blocks, final_norm, head) if m is not None]
parameters = [p for m in modules for p in m.parameters()]
print(f"rank {rank}: stage {rank} of 2, {sum(p.numel() for p in parameters) / 1e6:.1f}M parameters", flush=True)
optimizer = torch.optim.AdamW(parameters, lr=3e-4, weight_decay=0.1)
mask = torch.nn.Transformer.generate_square_subsequent_mask(args.seq_len, device="cuda")
shape = (args.micro_batch, args.seq_len, d_model)
for step in range(args.steps):
    tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), device="cuda")
    if first:
        x = embed(tokens[:, :-1])
    else:
        x = torch.randn(shape, device="cuda", requires_grad=True)  # received from stage 0
    for block in blocks:
        x = block(x, src_mask=mask, is_causal=True)
    if last:
        logits = head(final_norm(x)).float()
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        del logits
        report = f"loss {loss.item():.4f}"
    else:
        x.backward(torch.randn(shape, device="cuda") * 1e-3)  # the gradient received from stage 1
        report = "sent activations"
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"rank {rank} step {step} {report}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "rank": rank, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
