"""A mixture-of-experts language model (4 layers of top-2 routing over 8 feed-forward experts, no
capacity limit: every token reaches its two experts) trained in bfloat16 autocast on batches whose
topic shifts from step to step, so the router sends very uneven and changing numbers of tokens to
each expert. Each expert's activations are gathered, saved and scattered in blocks whose sizes
differ at every layer of every step.

    python3 moe_uneven_routing.py --cap-gib G [--batch-size 16] [--seq-len 512] [--steps 40]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--steps", type=int, default=40)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
vocab, d_model, experts, ffn, depth, top_k = 8192, 1024, 8, 2048, 4, 2


class MoELayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d_model)
        self.router = torch.nn.Linear(d_model, experts, bias=False)
        self.experts = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(d_model, ffn), torch.nn.GELU(),
                                                                torch.nn.Linear(ffn, d_model))
                                            for _ in range(experts)])

    def forward(self, x, topic):
        """x: [tokens, d_model]; topic: a per-step bias of the router (the batch's subject)."""
        h = self.norm(x)
        probs = (self.router(h) + topic).softmax(dim=-1)
        weights, chosen = probs.topk(top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        order = chosen.view(-1).argsort()
        per_expert = torch.bincount(chosen.view(-1), minlength=experts)
        # The load-balancing loss of Switch Transformers: fraction routed x mean probability.
        balance = experts * (per_expert.float() / chosen.numel() * probs.mean(dim=0)).sum()
        counts = per_expert.tolist()
        token_of = order // top_k
        gate = weights.view(-1)[order]
        out = torch.zeros_like(x)
        start = 0
        for expert, n in zip(self.experts, counts):
            if n:
                index = token_of[start:start + n]
                y = expert(h[index]) * gate[start:start + n, None]
                out = out.index_add(0, index, y.to(out.dtype))
            start += n
        return x + out, counts, balance


embed = torch.nn.Embedding(vocab, d_model).cuda()
layers = torch.nn.ModuleList([MoELayer() for _ in range(depth)]).cuda()
head = torch.nn.Linear(d_model, vocab).cuda()
parameters = [*embed.parameters(), *layers.parameters(), *head.parameters()]
optimizer = torch.optim.AdamW(parameters, lr=1e-4)
for step in range(args.steps):
    topic = torch.randn(experts, device="cuda") * 0.75
    tokens = torch.randint(0, vocab, (args.batch_size * args.seq_len + 1,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = embed(tokens[:-1])
        loads, balance = [], 0.0
        for layer in layers:
            x, counts, layer_balance = layer(x, topic)
            loads.append(max(counts))
            balance = balance + layer_balance
        loss = F.cross_entropy(head(x).float(), tokens[1:]) + 0.01 * balance
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} busiest expert per layer {loads}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
