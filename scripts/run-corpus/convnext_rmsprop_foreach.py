"""ImageNet-style training of a ConvNeXt-XL-sized classifier (350M parameters) with a
TensorFlow-style RMSprop recipe: momentum 0.9, alpha 0.9, eps 1e-3, L2 weight decay 1e-5.

Scenario: a training script ported from a TF/EfficientNet recipe to PyTorch: torch.optim.RMSprop
with momentum and (coupled, L2) weight decay, left at its default implementation, which on a GPU
is the multi-tensor "foreach" one.

Cause: the foreach RMSprop step works on every parameter at once. With weight_decay > 0 it
first makes `grad + weight_decay * param` as a new list of tensors (a copy of all gradients), and
then `sqrt(square_avg) + eps` as another full-size list, both alive until the update ends; with
the momentum buffer and the square average that is 6 x the parameters' size during the step.
The first `optimizer.step()` runs out of memory after the forward and backward passes fitted.
`--foreach 0` (the for-loop implementation) makes those temporaries one parameter at a time.

Memory (fp32, batch 2 at 192 x 192; a CPU trace measured the peaks below):
  parameters: 350.2M x 4 B = 1.40 GB (P); gradients P; RMSprop state (square_avg and
  momentum_buffer) 2P, allocated in the first step.
  activations: ~0.33 GB an image at 192 px (stage 3: 27 blocks at 12 x 12 x 1,024 with the 4x
  MLP), x 2 = 0.66 GB, freed by the end of the backward.
  cap_from (--foreach 0): the later steps' backward, P + 2P + activations + gradients as they
  come, or the step, 4P + 2 x 67 MB (largest weight): peak allocated ~5.5 GB (reserved ~5.9).
  own (foreach): P + P + 2P + P (decayed-gradient copy) + P (sqrt) = 6P = 8.4 GB (7.8 GiB),
  1.33 x the cap_from reserved peak: fails inside the first optimizer.step().

    python3 convnext_rmsprop_foreach.py --cap-gib G [--foreach 1|0] [--weight-decay 1e-5]
        [--optimizer rmsprop|sgd] [--batch-size 2] [--image-size 192] [--depths 3,3,27,3] [--steps 6]
"""

import argparse

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--foreach", type=int, default=1, help="0: RMSprop's for-loop implementation")
parser.add_argument("--weight-decay", type=float, default=1e-5, help="L2 penalty (RMSprop couples it into the gradient)")
parser.add_argument("--optimizer", default="rmsprop", choices=["rmsprop", "sgd"])
parser.add_argument("--batch-size", type=int, default=2)
parser.add_argument("--image-size", type=int, default=192)
parser.add_argument("--depths", default="3,3,27,3", help="blocks per stage")
parser.add_argument("--dims", default="256,512,1024,2048", help="channels per stage")
parser.add_argument("--steps", type=int, default=6)
args = parse_args(parser)

torch.manual_seed(0)
depths = [int(x) for x in args.depths.split(",")]
dims = [int(x) for x in args.dims.split(",")]


class LayerNorm2d(torch.nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.pwconv1 = torch.nn.Linear(dim, 4 * dim)
        self.pwconv2 = torch.nn.Linear(4 * dim, dim)
        self.gamma = torch.nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)  # NHWC for the pointwise layers
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).permute(0, 3, 1, 2)


class ConvNeXt(torch.nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.downsample = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Conv2d(3, dims[0], 4, stride=4),
                                                                   LayerNorm2d(dims[0]))])
        for c_in, c_out in zip(dims[:-1], dims[1:]):
            self.downsample.append(torch.nn.Sequential(LayerNorm2d(c_in), torch.nn.Conv2d(c_in, c_out, 2, stride=2)))
        self.stages = torch.nn.ModuleList([torch.nn.Sequential(*[ConvNeXtBlock(d) for _ in range(n)])
                                           for d, n in zip(dims, depths)])
        self.norm = torch.nn.LayerNorm(dims[-1])
        self.head = torch.nn.Linear(dims[-1], classes)

    def forward(self, x):
        for down, stage in zip(self.downsample, self.stages):
            x = stage(down(x))
        return self.head(self.norm(x.mean(dim=(2, 3))))


model = ConvNeXt().to(DEVICE)
if args.optimizer == "rmsprop":
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.016 * args.batch_size / 256, alpha=0.9, eps=1e-3,
                                    momentum=0.9, weight_decay=args.weight_decay, foreach=bool(args.foreach))
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * args.batch_size / 256, momentum=0.9,
                                weight_decay=args.weight_decay, foreach=bool(args.foreach))
print(f"ConvNeXt {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {args.optimizer} "
      f"({'foreach' if args.foreach else 'for-loop'})", flush=True)
for step in range(args.steps):
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=DEVICE)
    labels = torch.randint(0, 1000, (args.batch_size,), device=DEVICE)
    loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
finish(args.steps)
