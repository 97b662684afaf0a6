"""Fine-tuning a ViT-Base (16x16 patches, 12 blocks of width 768) at a high image resolution,
as detection and segmentation backbones are (ViTDet, SAM): at 1024x1024 an image is 4096 tokens,
and every block saves its LayerNorm inputs, attention inputs and outputs and its MLP's 3072-wide
hidden activations for the backward pass, under bfloat16 autocast. The first forward/backward
pass runs out. `--checkpoint 1` recomputes each block in the backward pass
(torch.utils.checkpoint), keeping only the blocks' inputs; a smaller batch or a smaller image
(fewer tokens) saves fewer activations.

    python3 vit_large_image.py --cap-gib G [--checkpoint 0|1] [--batch-size 4] [--image-size 1024]
                               [--steps 8]
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
parser.add_argument("--image-size", type=int, default=1024)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--depth", type=int, default=12)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
patch, width, heads, classes = 16, 768, 12, 150


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width, eps=1e-6)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width, eps=1e-6)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, width))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(torch.nn.Module):
    def __init__(self, image_size):
        super().__init__()
        self.patch_embed = torch.nn.Conv2d(3, width, patch, stride=patch)
        self.pos_embed = torch.nn.Parameter(torch.zeros(1, (image_size // patch) ** 2, width))
        torch.nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(args.depth)])
        self.norm = torch.nn.LayerNorm(width, eps=1e-6)
        self.head = torch.nn.Linear(width, classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.checkpoint else block(x)
        return self.head(self.norm(x).mean(dim=1))


model = ViT(args.image_size).cuda()
print(f"ViT-B/16 at {args.image_size}x{args.image_size}: {(args.image_size // patch) ** 2} tokens per image, "
      f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
for step in range(args.steps):
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device="cuda")
    labels = torch.randint(0, classes, (args.batch_size,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
