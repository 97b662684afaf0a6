"""Semi-supervised video object segmentation (STM-style space-time memory) over a 10-second
720p video with 4 annotated objects.

Scenario: inference with a space-time memory network: the first frame's masks are given; every
frame is encoded to a key (64 channels at 1/16 resolution), the query key attends over the keys
of the memory frames and reads their values (512 channels per object), a decoder predicts the
masks, and every `--mem-every` frames the frame's key and per-object values (encoded with the
predicted masks) are appended to the memory bank with torch.cat.

Cause: the bank grows by one frame's keys and values every `--mem-every` frames for the whole
video, with no bound: STM's published setting, written for short DAVIS clips. On a long video
it outgrows the card, each torch.cat briefly holding the old and the new bank. The job runs out
of memory part-way through the video. `--max-memory-frames 16` bounds the bank (the first frame
and the most recent frames, as XMem's working memory does).

Memory (fp32, 720 x 1280 frames, 45 x 80 = 3,600 positions at 1/16, 4 objects, 300 frames,
--mem-every 3):
  parameters 16.1M x 4 B = 64 MB; per-frame encoder/decoder activations ~0.3 GB (transient, inference).
  one memory frame: (64 + 4 x 512) channels x 3,600 x 4 B = 30.4 MB; readout temporaries per
  query chunk of 512 positions: 2 x frames x 3,600 x 512 x 4 B = 14.7 MB per memory frame.
  cap_from (--max-memory-frames 16): bank 16 x 30.4 = 0.49 GB, x 2 during the cat (and the
  trim), + 0.25 GB readout + ~0.3 GB encoders: peak allocated ~1.4 GB (the cap is 1.3 x that,
  ~1.8 GB: the bounded bank's earlier, smaller cat blocks stay cached when nothing presses).
  own (no bound): 100 memory frames by the end (3.0 GB, 6.1 GB while concatenating); the bank's
  cat alone needs 2 x 30.4 MB per memory frame: past the cap at about 30 memory frames (frame
  ~90 of 300): fails during the video, in the torch.cat that grows the bank (or the readout).

    python3 video_memory_bank.py --cap-gib G [--max-memory-frames 0] [--mem-every 3] [--frames 300]
        [--objects 4] [--height 720] [--width 1280]
"""

import argparse

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--max-memory-frames", type=int, default=0,
                    help="keep the first and the latest frames, at most this many (0: no bound)")
parser.add_argument("--mem-every", type=int, default=3, help="add a memory frame every this many frames")
parser.add_argument("--frames", type=int, default=300)
parser.add_argument("--objects", type=int, default=4)
parser.add_argument("--height", type=int, default=720)
parser.add_argument("--width", type=int, default=1280)
parser.add_argument("--query-chunk", type=int, default=512, help="query positions read out at a time")
args = parse_args(parser)

torch.manual_seed(0)
KEY_DIM, VALUE_DIM = 64, 512


def down(c_in, c_out):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), torch.nn.BatchNorm2d(c_out),
                               torch.nn.ReLU(inplace=True), torch.nn.Conv2d(c_out, c_out, 3, padding=1),
                               torch.nn.BatchNorm2d(c_out), torch.nn.ReLU(inplace=True))


class Encoder(torch.nn.Module):
    """A stride-16 convolutional encoder; returns the 1/4 and 1/16 features."""

    def __init__(self, c_in):
        super().__init__()
        self.s2, self.s4, self.s8, self.s16 = down(c_in, 32), down(32, 64), down(64, 256), down(256, 512)

    def forward(self, x):
        f4 = self.s4(self.s2(x))
        return f4, self.s16(self.s8(f4))


class SpaceTimeMemoryNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.key_encoder = Encoder(3)
        self.key_proj = torch.nn.Conv2d(512, KEY_DIM, 3, padding=1)
        self.query_value = torch.nn.Conv2d(512, VALUE_DIM, 3, padding=1)
        self.value_encoder = Encoder(4)  # the frame and one object's mask
        self.value_proj = torch.nn.Conv2d(512, VALUE_DIM, 3, padding=1)
        self.fuse = torch.nn.Sequential(torch.nn.Conv2d(2 * VALUE_DIM, 256, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(256, 64, 1))
        self.refine = torch.nn.Sequential(torch.nn.Conv2d(64 + 64, 32, 3, padding=1), torch.nn.ReLU(),
                                          torch.nn.Conv2d(32, 1, 3, padding=1))

    def encode_query(self, frame):
        f4, f16 = self.key_encoder(frame)
        return f4, self.key_proj(f16), self.query_value(f16)

    def encode_values(self, frame, masks):
        """Values of each object, encoded one object at a time: [objects, VALUE_DIM, h, w]."""
        return torch.cat([self.value_proj(self.value_encoder(torch.cat([frame, mask[None, None]], dim=1))[1])
                          for mask in masks])

    def readout(self, query_key, memory_keys, memory_values):
        """Attention of each query position over all memory positions, in chunks of query positions.
        query_key [KEY_DIM, hw]; memory_keys [KEY_DIM, T*hw]; memory_values [objects, VALUE_DIM, T*hw]."""
        out = []
        for start in range(0, query_key.shape[1], args.query_chunk):
            q = query_key[:, start:start + args.query_chunk]
            affinity = (memory_keys.T @ q * KEY_DIM ** -0.5).softmax(dim=0)  # [T*hw, chunk]
            out.append(memory_values @ affinity)                              # [objects, VALUE_DIM, chunk]
        return torch.cat(out, dim=2)

    def decode(self, f4, query_value, read, size):
        k, h, w = read.shape[0], query_value.shape[-2], query_value.shape[-1]
        x = F.relu(self.fuse(torch.cat([read.view(k, VALUE_DIM, h, w), query_value.expand(k, -1, -1, -1)], dim=1)))
        # Upsampled to 1/4 and refined with the 1/4 features, one object at a time.
        masks = []
        for obj in range(k):
            up = F.interpolate(x[obj:obj + 1], size=f4.shape[-2:], mode="bilinear", align_corners=False)
            logits = self.refine(torch.cat([up, f4], dim=1))
            masks.append(F.interpolate(logits, size=size, mode="bilinear", align_corners=False)[0, 0])
        return torch.stack(masks)


def soft_aggregate(logits):
    """Object probabilities that sum to one with the background (STM's soft aggregation)."""
    probs = torch.sigmoid(logits).clamp(1e-7, 1 - 1e-7)
    background = (1 - probs).prod(dim=0, keepdim=True)
    odds = torch.cat([background, probs], dim=0)
    odds = odds / (1 - odds)
    return (odds / odds.sum(dim=0, keepdim=True))[1:]


def video_frame(t):
    """A synthetic 720p frame: a slowly moving pattern plus noise."""
    g = torch.Generator(device=DEVICE).manual_seed(t)
    base = torch.sin(torch.linspace(0, 12, args.width, device=DEVICE)[None, None, :] + 0.05 * t)
    frame = base.expand(3, args.height, args.width) + 0.3 * torch.randn(3, args.height, args.width, device=DEVICE,
                                                                          generator=g)
    return frame[None]


model = SpaceTimeMemoryNet().to(DEVICE).eval()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; {args.frames} frames of "
      f"{args.height}x{args.width}, {args.objects} objects, a memory frame every {args.mem_every}", flush=True)
with torch.inference_mode():
    frame = video_frame(0)
    masks = torch.zeros(args.objects, args.height, args.width, device=DEVICE)  # first-frame annotation
    for i in range(args.objects):
        masks[i, 100 + 120 * i: 260 + 120 * i, 200 + 200 * i: 400 + 200 * i] = 1.0
    _, memory_keys, _ = model.encode_query(frame)
    memory_keys = memory_keys[0].flatten(1)
    memory_values = model.encode_values(frame, masks).flatten(2)
    positions = memory_keys.shape[1]
    area = torch.zeros(args.objects, device=DEVICE)
    for t in range(1, args.frames):
        frame = video_frame(t)
        f4, query_key, query_value = model.encode_query(frame)
        read = model.readout(query_key[0].flatten(1), memory_keys, memory_values)
        masks = soft_aggregate(model.decode(f4, query_value, read, frame.shape[-2:]))
        area += masks.mean(dim=(1, 2))
        if t % args.mem_every == 0:
            memory_keys = torch.cat([memory_keys, query_key[0].flatten(1)], dim=1)
            memory_values = torch.cat([memory_values, model.encode_values(frame, masks).flatten(2)], dim=2)
            frames_kept = memory_keys.shape[1] // positions
            if args.max_memory_frames and frames_kept > args.max_memory_frames:
                recent = (args.max_memory_frames - 1) * positions
                memory_keys = torch.cat([memory_keys[:, :positions], memory_keys[:, -recent:]], dim=1)
                memory_values = torch.cat([memory_values[:, :, :positions], memory_values[:, :, -recent:]], dim=2)
        if t % 30 == 0:
            print(f"frame {t}: {memory_keys.shape[1] // positions} memory frames "
                  f"({(memory_keys.numel() + memory_values.numel()) * 4 / 2**30:.2f} GiB), "
                  f"mean object area {(area / t).mean().item():.4f}", flush=True)
finish(args.frames)
