"""A transformer language model trained on documents of long-tailed length (seeded): most batches
are a few hundred tokens, and one batch, a dozen steps in, holds long documents. The run fails
inside that step after the short ones completed.

    python3 long_tail_lengths.py --cap-gib G [--batch-size 8] [--max-len 4096] [--steps 30]
"""

import argparse
import json
import random
import time

import torch
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--max-len", type=int, default=4096)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--long-step", type=int, default=12, help="the step whose batch is long documents")
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

rng = random.Random(11)
torch.manual_seed(11)
vocab, d_model = 8192, 512
embed = torch.nn.Embedding(vocab, d_model).cuda()
layer = torch.nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True,
                                         norm_first=True)
body = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
head = torch.nn.Linear(d_model, vocab).cuda()
parameters = [*embed.parameters(), *body.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(parameters, lr=1e-4)
for step in range(args.steps):
    if step == args.long_step:
        length = args.max_len
    else:
        length = min(args.max_len, 64 * round(256 * rng.paretovariate(2.5) / 64))
    tokens = torch.randint(0, vocab, (args.batch_size, length + 1), device="cuda")
    mask = torch.nn.Transformer.generate_square_subsequent_mask(length, device="cuda")
    hidden = body(embed(tokens[:, :-1]), mask=mask, is_causal=True)
    loss = torch.nn.functional.cross_entropy(head(hidden).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} length {length} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
