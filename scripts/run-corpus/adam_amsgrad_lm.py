"""Training a GPT-2-medium-sized language model (24 blocks of width 1024, 354M float32 parameters)
on short batches under bfloat16 autocast, with `torch.optim.Adam(amsgrad=True)` as an old recipe
sets it: AMSGrad keeps a third state tensor per parameter (the running maximum of the second
moment) beside Adam's two, and the default (foreach) step makes its temporaries for all
parameters at once. The forward and backward passes fit; the first `optimizer.step()` runs out
making the state. `--optimizer adafactor` keeps factored second moments only, `--optimizer sgd`
one momentum buffer; `--amsgrad 0` drops the third state; `--fused 1` uses the fused kernel
(no foreach temporaries).

    python3 adam_amsgrad_lm.py --cap-gib G [--optimizer adam|adafactor|sgd] [--amsgrad 0|1]
                               [--fused 0|1] [--batch-size 2] [--steps 6]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--optimizer", default="adam", choices=["adam", "adafactor", "sgd"])
parser.add_argument("--amsgrad", type=int, default=1)
parser.add_argument("--fused", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=2)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--depth", type=int, default=24)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
vocab, d_model, heads = 50304, 1024, 16


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.fc = torch.nn.Linear(d_model, 4 * d_model)
        self.out = torch.nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d_model)
        self.wpe = torch.nn.Embedding(args.seq_len, d_model)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
        self.ln_f = torch.nn.LayerNorm(d_model)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the head tied to the embedding, as GPT-2's


model = GPT().cuda()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)
if args.optimizer == "adam":
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95), amsgrad=bool(args.amsgrad),
                                 fused=True if args.fused else None)
elif args.optimizer == "adafactor":
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
for step in range(args.steps):
    tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    print(f"step {step} loss {loss.item():.4f}, stepping {type(optimizer).__name__}", flush=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
