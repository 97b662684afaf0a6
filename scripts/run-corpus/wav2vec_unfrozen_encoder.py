"""CTC fine-tuning of a wav2vec 2.0 (base-sized) speech model on 15-second utterances.

Scenario: a speech-recognition fine-tuning script: a pretrained wav2vec 2.0 encoder (a 7-layer
convolutional feature encoder over the raw 16 kHz waveform, then 12 transformer layers of width
768) gets a CTC head over 32 characters and is trained with AdamW on batches of 8 utterances.

Mistake: the recipe (fairseq's feature_grad_mult=0, Hugging Face's model.freeze_feature_encoder())
freezes the convolutional feature encoder; this script forgets to, so the first convolutions run
under autograd at nearly the waveform's rate (48,000 frames a second of audio at 512 channels
after the first layer) and every one of their outputs, GroupNorm and GELU intermediates is saved
for the backward pass. The first forward pass runs out of memory. `--freeze-feature-encoder 1`
runs the feature encoder without gradients (as the recipe does), leaving only the transformer's
activations.

Memory (fp32, batch 8, 15 s = 240,000 samples, conv dim 512, width 768, 12 layers):
  parameters 94.4M x 4 B = 0.38 GB; AdamW state 0.75 GB and gradients 0.38 GB only from the
  first step on (the unfrozen config fails before them).
  feature encoder, saved for backward when not frozen (per utterance): layer 0: conv output,
  GroupNorm output, GELU output, 3 x 512 x 47,999 x 4 B = 295 MB; layers 1-6: conv output and
  GELU output at lengths 23,999 .. 749: 2 x 512 x 47,997 x 4 B = 197 MB; total ~0.49 GB, x 8 =
  3.9 GB (frozen: none saved; at most ~1.6 GB transient while layer 0/1 run).
  transformer, saved (per utterance): ~18 tensors of 749 x 768 x 4 B per layer = 41 MB, x 12
  layers = 0.5 GB, x 8 = 4.0 GB; plus feature projection/positional conv ~0.1 GB.
  (a CPU trace at batch 2 measured ~1.0 GB an utterance unfrozen, ~0.5 GB frozen.)
  cap_from (--freeze-feature-encoder 1): from the second step on, 0.38 + 0.75 AdamW + 4.1
  activations + gradients as they come: peak ~5.3 GB.
  own (0): the first forward alone needs 0.38 + 3.9 + 4.1 = 8.4 GB, ~1.5 x the cap (~5.6 GB):
  fails in the first forward pass (inside the transformer layers, after the feature encoder).

    python3 wav2vec_unfrozen_encoder.py --cap-gib G [--freeze-feature-encoder 0|1] [--batch-size 8]
        [--seconds 15] [--precision fp32|bf16] [--layers 12] [--width 768] [--conv-dim 512] [--steps 8]
"""

import argparse
import contextlib

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--freeze-feature-encoder", type=int, default=0,
                    help="1: run the convolutional feature encoder without gradients, as the recipe does")
parser.add_argument("--batch-size", type=int, default=8, help="utterances per batch")
parser.add_argument("--seconds", type=float, default=15.0, help="utterance length (16 kHz audio)")
parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast")
parser.add_argument("--layers", type=int, default=12, help="transformer layers")
parser.add_argument("--width", type=int, default=768, help="transformer width")
parser.add_argument("--conv-dim", type=int, default=512, help="feature encoder channels")
parser.add_argument("--steps", type=int, default=8)
args = parse_args(parser)

torch.manual_seed(0)
SAMPLE_RATE = 16000
VOCAB = 32  # CTC blank + characters
ATTN_DROPOUT = 0.1


class FeatureEncoder(torch.nn.Module):
    """wav2vec 2.0's convolutional feature encoder ("group" norm mode): 7 temporal convolutions,
    GroupNorm after the first, GELU after each; 320x downsampling overall."""

    def __init__(self, dim):
        super().__init__()
        spec = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
        self.convs = torch.nn.ModuleList()
        c_in = 1
        for kernel, stride in spec:
            self.convs.append(torch.nn.Conv1d(c_in, dim, kernel, stride=stride, bias=False))
            c_in = dim
        self.norm = torch.nn.GroupNorm(dim, dim)

    def forward(self, waveform):
        x = waveform[:, None, :]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i == 0:
                x = self.norm(x)
            x = F.gelu(x)
        return x.transpose(1, 2)  # [batch, frames, dim]


class EncoderLayer(torch.nn.Module):
    """A post-norm transformer layer as in wav2vec 2.0 base."""

    def __init__(self, width):
        super().__init__()
        self.heads = max(1, width // 64)  # 12 heads of 64 channels at width 768
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm1 = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.dropout = torch.nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=ATTN_DROPOUT if self.training else 0.0)
        x = self.norm1(x + self.dropout(self.out(attn.transpose(1, 2).reshape(b, t, d))))
        h = self.fc2(self.dropout(F.gelu(self.fc1(x))))
        return self.norm2(x + self.dropout(h))


class Wav2Vec2ForCTC(torch.nn.Module):
    def __init__(self, conv_dim, width, layers):
        super().__init__()
        self.feature_encoder = FeatureEncoder(conv_dim)
        self.feature_norm = torch.nn.LayerNorm(conv_dim)
        self.feature_projection = torch.nn.Linear(conv_dim, width)
        self.pos_conv = torch.nn.Conv1d(width, width, 128, padding=64, groups=16)
        self.layers = torch.nn.ModuleList([EncoderLayer(width) for _ in range(layers)])
        self.encoder_norm = torch.nn.LayerNorm(width)
        self.ctc_head = torch.nn.Linear(width, VOCAB)

    def forward(self, waveform, freeze_feature_encoder):
        grad = contextlib.nullcontext() if not freeze_feature_encoder else torch.no_grad()
        with grad:
            features = self.feature_encoder(waveform)
        x = self.feature_projection(self.feature_norm(features))
        pos = F.gelu(self.pos_conv(x.transpose(1, 2))[:, :, :-1])
        x = self.encoder_norm(x + pos.transpose(1, 2))
        for layer in self.layers:
            x = layer(x)
        return self.ctc_head(x)


model = Wav2Vec2ForCTC(args.conv_dim, args.width, args.layers).to(DEVICE)
if args.freeze_feature_encoder:
    model.feature_encoder.requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(trainable, lr=3e-5, weight_decay=0.01)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
      f"{sum(p.numel() for p in trainable) / 1e6:.1f}M trainable", flush=True)

samples = int(args.seconds * SAMPLE_RATE)
autocast = (torch.autocast(DEVICE.type, dtype=torch.bfloat16) if args.precision == "bf16"
            else contextlib.nullcontext())
model.train()
for step in range(args.steps):
    # A batch of utterances (synthetic audio) with their character transcripts.
    waveform = torch.randn(args.batch_size, samples, device=DEVICE) * 0.1
    target_len = max(4, int(args.seconds * 12))  # ~12 characters a second
    targets = torch.randint(1, VOCAB, (args.batch_size, target_len), device=DEVICE)
    with autocast:
        logits = model(waveform, args.freeze_feature_encoder)
    log_probs = logits.float().log_softmax(dim=-1).transpose(0, 1)  # [frames, batch, vocab]
    frames = torch.full((args.batch_size,), log_probs.shape[0], dtype=torch.long, device=DEVICE)
    lengths = torch.full((args.batch_size,), target_len, dtype=torch.long, device=DEVICE)
    loss = F.ctc_loss(log_probs, targets, frames, lengths, blank=0, zero_infinity=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} ctc loss {loss.item():.4f} ({log_probs.shape[0]} frames)", flush=True)
finish(args.steps)
