"""A UNet (residual blocks with GroupNorm and SiLU, skip connections from each encoder level to
the decoder) trained for image restoration at 512x512: the activations its full-resolution
levels save for the backward pass do not fit, and the first forward/backward pass runs out.
`--checkpoint 1` recomputes each residual block in the backward pass (torch.utils.checkpoint),
keeping only the blocks' inputs; a smaller batch fits too.

    python3 unet_highres.py --cap-gib G [--checkpoint 0|1] [--batch-size 4] [--resolution 512] [--steps 6]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--checkpoint", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--resolution", type=int, default=512)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)


class ResBlock(torch.nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.norm1 = torch.nn.GroupNorm(8, c_in)
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = torch.nn.GroupNorm(8, c_out)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = torch.nn.Conv2d(c_in, c_out, 1) if c_in != c_out else torch.nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class UNet(torch.nn.Module):
    def __init__(self, channels=(32, 64, 128, 256)):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels[0], 3, padding=1)
        self.down_blocks = torch.nn.ModuleList()
        self.downsample = torch.nn.ModuleList()
        c = channels[0]
        for i, width in enumerate(channels):
            self.down_blocks.append(torch.nn.ModuleList([ResBlock(c, width), ResBlock(width, width)]))
            c = width
            if i < len(channels) - 1:
                self.downsample.append(torch.nn.Conv2d(c, c, 3, stride=2, padding=1))
        self.middle = ResBlock(c, c)
        self.upsample = torch.nn.ModuleList()
        self.up_blocks = torch.nn.ModuleList()
        for i, width in reversed(list(enumerate(channels))):
            if i < len(channels) - 1:
                self.upsample.append(torch.nn.Conv2d(c, c, 3, padding=1))
            self.up_blocks.append(torch.nn.ModuleList([ResBlock(c + width, width), ResBlock(width, width)]))
            c = width
        self.out = torch.nn.Sequential(torch.nn.GroupNorm(8, c), torch.nn.SiLU(),
                                       torch.nn.Conv2d(c, 3, 3, padding=1))

    def block(self, module, x):
        return checkpoint(module, x, use_reentrant=False) if args.checkpoint else module(x)

    def forward(self, x):
        h = self.stem(x)
        skips = []
        for i, blocks in enumerate(self.down_blocks):
            for b in blocks:
                h = self.block(b, h)
            skips.append(h)
            if i < len(self.downsample):
                h = self.downsample[i](h)
        h = self.block(self.middle, h)
        for i, blocks in enumerate(self.up_blocks):
            if i > 0:
                h = self.upsample[i - 1](F.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = torch.cat([h, skips.pop()], dim=1)
            for b in blocks:
                h = self.block(b, h)
        return self.out(h)


net = UNet().cuda()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
size = args.resolution
for step in range(args.steps):
    clean = torch.rand(args.batch_size, 3, size, size, device="cuda")
    noisy = clean + 0.1 * torch.randn_like(clean)
    loss = F.l1_loss(net(noisy), clean)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
