"""Language-model training with gradient accumulation over --accum-steps micro-batches and a
token accuracy reported once per accumulation window: the loop keeps each micro-batch's logits
(detached) and targets in a list and scores them all at the optimizer step. Within a window the
kept logits add up micro-batch after micro-batch, on top of each micro-batch's own activations;
they are freed at the step. `--keep-outputs 0` counts the correct tokens of each micro-batch
right away and keeps only the counts.

    python3 accum_kept_outputs.py --cap-gib G [--keep-outputs 0|1] [--accum-steps 16]
                                  [--micro-batch 8] [--seq-len 512] [--windows 3]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--keep-outputs", type=int, default=1)
parser.add_argument("--accum-steps", type=int, default=16)
parser.add_argument("--micro-batch", type=int, default=8)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--windows", type=int, default=3, help="optimizer steps")
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
vocab, d_model, depth = 8192, 512, 6
embed = torch.nn.Embedding(vocab, d_model).cuda()
layer = torch.nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
body = torch.nn.TransformerEncoder(layer, depth, enable_nested_tensor=False).cuda()
head = torch.nn.Linear(d_model, vocab).cuda()
parameters = [*embed.parameters(), *body.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(parameters, lr=3e-4)
mask = torch.nn.Transformer.generate_square_subsequent_mask(args.seq_len, device="cuda")
for window in range(args.windows):
    kept, correct, total = [], 0, 0
    for micro in range(args.accum_steps):
        tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), device="cuda")
        targets = tokens[:, 1:]
        logits = head(body(embed(tokens[:, :-1]), mask=mask, is_causal=True))
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / args.accum_steps
        loss.backward()
        if args.keep_outputs:
            kept.append((logits.detach(), targets))
        else:
            correct += int((logits.detach().argmax(dim=-1) == targets).sum())
            total += targets.numel()
        del logits, loss
        print(f"window {window} micro-batch {micro} kept {len(kept)}", flush=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for logits, targets in kept:
        correct += int((logits.argmax(dim=-1) == targets).sum())
        total += targets.numel()
    kept.clear()
    print(f"window {window} token accuracy {correct / total:.5f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "windows": args.windows, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
