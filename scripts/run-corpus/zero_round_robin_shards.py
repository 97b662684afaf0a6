"""A two-process data-parallel job with a hand-written ZeRO stage-1 optimizer (each rank keeps
the float32 master weights and AdamW moments of its shard of the parameters) training a
355M-parameter bfloat16 GPT, both ranks on one GPU under per-process memory caps.

Scenario: launched like torchrun (RANK, LOCAL_RANK, WORLD_SIZE per process); the job sets
`torch.cuda.set_per_process_memory_fraction` for each process, as ranks sharing a card do. Every
rank holds the bfloat16 model and its bfloat16 gradients; after the backward pass each rank
takes the float32 gradients of the parameters it owns (a reduce-scatter in a real job), steps
AdamW on its float32 master copies and writes them back into the bfloat16 weights (an all-gather
would share them; the communication is left out here, each process does its own rank's work).

Mistake: the shards are made round-robin over `model.parameters()`: `params[rank::world_size]`.
A GPT's parameters alternate weight, bias, weight, bias inside every block (and the embedding comes
first), so every weight matrix lands on rank 0 and rank 1 gets the biases: rank 0 owns 99.7% of
the parameters, and with them all of the master weights and moments. Rank 0 runs out of memory in
its first optimizer step while rank 1 trains on. `--partition balanced` assigns parameters
largest first to the less loaded rank, as torch's ZeroRedundancyOptimizer does.

Memory per rank (bf16 weights 2 B, fp32 master 4 B, fp32 gradient 4 B, moments 8 B per
parameter; micro-batch 2 x 512 tokens):
  every rank: weights 0.71 GB + gradients 0.71 GB (freed once copied to the shard's float32
  gradients) + activations ~0.85 GB saved, ~1.45 GB at the loss's backward (50k-token logits).
  balanced: shard ~177M: masters 0.71 + moments 1.42 from the first step on; the later steps'
  backward peaks at 0.71 + 0.71 + 1.42 + 0.71 + 1.45 = 5.0 GB (the step itself: 0.71 + 0.71
  + 0.71 fp32 gradients + 1.42 + 0.71 foreach temporaries = 4.3 GB).
  round-robin, rank 0 (shard 353.5M): 0.71 + 1.41 (masters) + 1.41 (fp32 gradients) + 2.83
  (moments) + 1.41 (temporaries) = 7.8 GB at its first step, 1.55 x rank 0's balanced peak: fails
  inside the first optimizer.step() (its backward, ~4.3 GB, fits); rank 1 (shard 1.3M) ~2.9 GB.

    python3 zero_round_robin_shards.py --cap-gib G [--partition round-robin|balanced] [--micro-batch 2]
        [--seq-len 512] [--layers 24] [--width 1024] [--steps 4]
"""

import argparse
import os

from ranks import run_as_ranks  # never imports torch: the launcher stays off the GPU

parser = argparse.ArgumentParser()
parser.add_argument("--partition", default="round-robin", choices=["round-robin", "balanced"],
                    help="how the optimizer state is sharded over the ranks")
parser.add_argument("--micro-batch", type=int, default=2, help="sequences per rank per step")
parser.add_argument("--seq-len", type=int, default=512)
parser.add_argument("--layers", type=int, default=24)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--vocab", type=int, default=50257)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
known, _ = parser.parse_known_args()
run_as_ranks(__file__, known.worker)

import torch  # noqa: E402  (the launcher itself never imports torch)
import torch.nn.functional as F  # noqa: E402

from corpus_job import DEVICE, finish, parse_args  # noqa: E402

args = parse_args(parser, how="cap")
rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.manual_seed(0)  # the same initial weights on every rank


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.heads = width // 64
        self.ln1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.ln2 = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, 4 * width)
        self.out = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(args.vocab, args.width)
        self.wpe = torch.nn.Embedding(args.seq_len, args.width)
        self.blocks = torch.nn.ModuleList([Block(args.width) for _ in range(args.layers)])
        self.ln_f = torch.nn.LayerNorm(args.width)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def shard_of(params):
    if args.partition == "round-robin":
        return params[rank::world_size]
    loads, owner = [0] * world_size, {}
    for i in sorted(range(len(params)), key=lambda i: -params[i].numel()):
        r = loads.index(min(loads))
        owner[i] = r
        loads[r] += params[i].numel()
    return [p for i, p in enumerate(params) if owner[i] == rank]


torch.set_default_dtype(torch.bfloat16)
with DEVICE:
    model = GPT()
torch.set_default_dtype(torch.float32)
params = list(model.parameters())
mine = shard_of(params)
masters = [p.detach().float().requires_grad_() for p in mine]
optimizer = torch.optim.AdamW(masters, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
print(f"rank {rank}: {sum(p.numel() for p in params) / 1e6:.1f}M parameters, this rank's shard "
      f"{sum(p.numel() for p in mine) / 1e6:.1f}M ({args.partition})", flush=True)
data = torch.Generator(device=DEVICE).manual_seed(100 + rank)
for step in range(args.steps):
    ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len + 1), device=DEVICE, generator=data)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    del logits
    loss.backward()
    for master, p in zip(masters, mine):  # this rank's gradients (reduce-scattered in a real job)
        master.grad = p.grad.float()
    model.zero_grad(set_to_none=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        for master, p in zip(masters, mine):  # then all-gathered to every rank
            p.copy_(master)
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
finish(args.steps, rank=rank)
