"""Training a Conformer-CTC speech recogniser on utterances of very different lengths, with
gradient accumulation over 4 micro-batches.

Scenario: an ASR recipe in the style of ESPnet/NeMo, written in plain PyTorch: 80-channel log-mel
features (10 ms frames) go through a 4x convolutional subsampling (two stride-2 3x3 convolutions
with 512 channels) and 6 Conformer blocks (width 512, 8 heads, a 31-wide depthwise convolution,
two half-step feed-forward modules), then a CTC head over 256 word pieces. Each micro-batch holds 12 utterances padded to the longest, whose
length is anything from 2 to 20 seconds (the data are shuffled, not sorted by length), and the
gradients of 4 micro-batches are accumulated before each AdamW step.

Cause: the total memory each micro-batch needs is well within the card, but every activation has
a new size at every micro-batch, and the accumulated gradients (made during the first
micro-batch's backward pass, in blocks the allocator cut out of that micro-batch's freed
activations) stay alive for the whole window, as does the optimizer state made in the first step.
The caching allocator's segments end up cut to old sizes and pinned by those long-lived blocks:
after some windows a long micro-batch finds no free block large enough and the job runs out of
memory with much memory reserved but unallocated.
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the calibration's configuration) lets segments
grow and shrink page by page; shorter micro-batches (`--batch-size 6`) lower the peak.

Memory (fp32 weights, bfloat16 autocast):
  parameters 43.8M x 4 B = 0.18 GB, gradients 0.18 GB, AdamW state 0.35 GB.
  activations: the subsampling convolutions' outputs at half the frame rate dominate, 12 x 512 x
  (frames / 2) x 39 x 2 B = 0.48 GB per tensor for 20 s utterances, several of them saved and as
  many gradients in the backward pass; each Conformer block ~0.3 GB at 12 x 500 frames. The
  longest micro-batches need ~3 GB, the shortest ~0.4 GB; every one has its own sizes.
  cap_from (expandable_segments, cap factor 1.0): reserved ~ allocated at the longest micro-batch,
  ~3.1 GB.
  own (native segments): a CPU trace of this program's allocations (4 blocks) replayed through a
  model of the caching allocator needed 3.7 GB of native segments where 2.4 GB of expandable
  segments sufficed (+54%): fails at a long micro-batch, in the subsampling convolutions'
  backward, with much memory reserved but unallocated.

    python3 conformer_ctc_varlen.py --cap-gib G [--batch-size 12] [--accumulate 4] [--max-seconds 20]
        [--layers 6] [--width 512] [--steps 12]
"""

import argparse
import random

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=12, help="utterances per micro-batch")
parser.add_argument("--accumulate", type=int, default=4, help="micro-batches per optimizer step")
parser.add_argument("--min-seconds", type=float, default=2.0)
parser.add_argument("--max-seconds", type=float, default=20.0)
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--vocab", type=int, default=256)
parser.add_argument("--steps", type=int, default=12, help="optimizer steps")
args = parse_args(parser)

torch.manual_seed(0)
rng = random.Random(0)
MELS, HEADS, KERNEL = 80, 8, 31


class FeedForward(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(F.silu(self.up(self.norm(x))))


class ConvModule(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.pointwise1 = torch.nn.Conv1d(d, 2 * d, 1)
        self.depthwise = torch.nn.Conv1d(d, d, KERNEL, padding=KERNEL // 2, groups=d)
        self.batch_norm = torch.nn.BatchNorm1d(d)
        self.pointwise2 = torch.nn.Conv1d(d, d, 1)

    def forward(self, x):
        h = F.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)
        h = self.pointwise2(F.silu(self.batch_norm(self.depthwise(h))))
        return h.transpose(1, 2)


class ConformerBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff1, self.ff2 = FeedForward(d), FeedForward(d)
        self.attn_norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.conv = ConvModule(d)
        self.final_norm = torch.nn.LayerNorm(d)

    def forward(self, x, key_padding):
        x = x + 0.5 * self.ff1(x)
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=~key_padding[:, None, None, :])
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, d))
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.final_norm(x)


class ConformerCTC(torch.nn.Module):
    def __init__(self):
        super().__init__()
        d = args.width
        self.subsample = torch.nn.Sequential(torch.nn.Conv2d(1, d, 3, stride=2), torch.nn.ReLU(),
                                             torch.nn.Conv2d(d, d, 3, stride=2), torch.nn.ReLU())
        self.project = torch.nn.Linear(d * (((MELS - 1) // 2 - 1) // 2), d)
        self.blocks = torch.nn.ModuleList([ConformerBlock(d) for _ in range(args.layers)])
        self.head = torch.nn.Linear(d, args.vocab)

    def forward(self, features, frames):
        x = self.subsample(features[:, None])                      # [batch, d, time/4, mels/4]
        x = self.project(x.permute(0, 2, 1, 3).flatten(2))
        frames = ((frames - 1) // 2 - 1) // 2
        key_padding = torch.arange(x.shape[1], device=x.device)[None, :] >= frames[:, None]
        for block in self.blocks:
            x = block(x, key_padding)
        return self.head(x), frames


def micro_batch():
    """12 utterances of random length (10 ms frames), padded to the longest, with transcripts."""
    seconds = [rng.uniform(args.min_seconds, args.max_seconds) for _ in range(args.batch_size)]
    frames = torch.tensor([int(s * 100) for s in seconds], device=DEVICE)
    features = torch.randn(args.batch_size, int(frames.max()), MELS, device=DEVICE)
    features = features * (torch.arange(features.shape[1], device=DEVICE)[None, :, None] < frames[:, None, None])
    target_lengths = (frames // 12).clamp(min=1)  # ~8 word pieces a second
    targets = torch.randint(1, args.vocab, (args.batch_size, int(target_lengths.max())), device=DEVICE)
    return features, frames, targets, target_lengths


model = ConformerCTC().to(DEVICE)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=1e-3)
print(f"Conformer-CTC {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, micro-batches of "
      f"{args.batch_size} utterances of {args.min_seconds:g}-{args.max_seconds:g} s, accumulating "
      f"{args.accumulate}", flush=True)
for step in range(args.steps):
    total = 0.0
    for micro in range(args.accumulate):
        features, frames, targets, target_lengths = micro_batch()
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            logits, out_frames = model(features, frames)
        log_probs = logits.float().log_softmax(dim=-1).transpose(0, 1)
        loss = F.ctc_loss(log_probs, targets, out_frames, target_lengths, zero_infinity=True) / args.accumulate
        loss.backward()
        total += loss.item()
        print(f"step {step} micro-batch {micro}: {features.shape[1]} frames", flush=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} ctc loss {total:.4f}", flush=True)
finish(args.steps)
