"""Differentially private fine-tuning (DP-SGD) of a small transformer text classifier, with
per-sample gradients from torch.func.

Scenario: DP-SGD as in Abadi et al. and Opacus: every example's gradient is computed separately
(here `vmap(grad(loss))` over the batch, as in PyTorch's per-sample-gradients tutorial), clipped
to norm 1.0, summed, noised and averaged. DP needs large logical batches, so the script uses 256
reviews of 128 tokens per step on a 4-layer, 256-wide transformer with a 30,522-token vocabulary
(11.0M parameters).

Mistake: the whole logical batch goes through vmap at once. vmap materialises one gradient per
example for every parameter at the same time: 256 copies of the model's 44 MB of gradients, and
for the token embedding a dense [256, 30522, 256] tensor by itself (8 GB). The first step runs out
of memory while the per-sample gradients are being made (the backward pass inside vmap).
`--physical-batch 32` does what Opacus's BatchMemoryManager does: per-sample gradients for 32
examples at a time, clipped and summed into the step's gradient before the next 32 (the same
update).

Memory (fp32):
  parameters 11.0M x 4 B = 44 MB; gradients 44 MB; AdamW state 88 MB.
  per-sample gradients: 256 x 44 MB = 11.3 GB (the embedding's alone: 256 x 7.81M x 4 B = 8.0 GB);
  physical batch 32: 32 x 44 MB = 1.4 GB, plus activations of 32 x 128 tokens and the
  batched backward's intermediates: a CPU trace measured 62 MB an example, 2.1 GB at 32.
  cap_from (--physical-batch 32): peak allocated ~2.1 GB (reserved up to ~3 GB).
  own (0 = the whole logical batch): needs 11.3 GB (the embedding alone 8 GB), > 2.5 x the cap: fails in the first step,
  inside vmap's backward, at the embedding's per-sample gradient at the latest.

    python3 dpsgd_per_sample_grads.py --cap-gib G [--physical-batch 0] [--batch-size 256]
        [--freeze-embeddings 0|1] [--seq-len 128] [--width 256] [--layers 4] [--vocab 30522] [--steps 4]
"""

import argparse

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--physical-batch", type=int, default=0,
                    help="examples per vmap call (0: the whole logical batch at once)")
parser.add_argument("--batch-size", type=int, default=256, help="logical batch (examples per DP-SGD step)")
parser.add_argument("--freeze-embeddings", type=int, default=0, help="1: train only the transformer and head")
parser.add_argument("--seq-len", type=int, default=128)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--vocab", type=int, default=30522)
parser.add_argument("--steps", type=int, default=4)
args = parse_args(parser)

torch.manual_seed(0)
MAX_GRAD_NORM, NOISE_MULTIPLIER, CLASSES = 1.0, 1.1, 2


class Block(torch.nn.Module):
    def __init__(self, width, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = (q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5).softmax(dim=-1)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TextClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(args.vocab, args.width)
        self.positions = torch.nn.Embedding(args.seq_len, args.width)
        self.blocks = torch.nn.ModuleList([Block(args.width) for _ in range(args.layers)])
        self.norm = torch.nn.LayerNorm(args.width)
        self.head = torch.nn.Linear(args.width, CLASSES)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


model = TextClassifier().to(DEVICE)
frozen_names = {"tokens.weight", "positions.weight"} if args.freeze_embeddings else set()
trainable = {n: p for n, p in model.named_parameters() if n not in frozen_names}
frozen = {n: p.detach() for n, p in model.named_parameters() if n in frozen_names}
for name, p in model.named_parameters():
    p.requires_grad_(name in trainable)
optimizer = torch.optim.AdamW(trainable.values(), lr=5e-4, weight_decay=0.0)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
      f"{sum(p.numel() for p in trainable.values()) / 1e6:.2f}M trained with DP-SGD", flush=True)


def example_loss(params, frozen_params, ids, label):
    logits = functional_call(model, {**params, **frozen_params}, (ids[None],))
    return F.cross_entropy(logits, label[None])


per_example_grads = vmap(grad(example_loss), in_dims=(None, None, 0, 0))
physical = args.physical_batch or args.batch_size
for step in range(args.steps):
    ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len), device=DEVICE)
    labels = torch.randint(0, CLASSES, (args.batch_size,), device=DEVICE)
    params = {n: p.detach() for n, p in trainable.items()}
    summed = {n: torch.zeros_like(p) for n, p in params.items()}
    clipped_fraction = 0.0
    for start in range(0, args.batch_size, physical):
        grads = per_example_grads(params, frozen, ids[start:start + physical], labels[start:start + physical])
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)
        factors = (MAX_GRAD_NORM / (norms + 1e-6)).clamp(max=1.0)
        clipped_fraction += (factors < 1.0).float().sum().item()
        for name, g in grads.items():
            summed[name] += torch.einsum("i,i...->...", factors, g)
        del grads
    for name, p in trainable.items():
        noise = torch.randn_like(p) * NOISE_MULTIPLIER * MAX_GRAD_NORM
        p.grad = (summed[name] + noise) / args.batch_size
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: {clipped_fraction / args.batch_size:.0%} of the examples clipped", flush=True)
finish(args.steps)
