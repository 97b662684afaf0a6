"""A DCGAN-style GAN trained at 256x256 (a transposed-convolution generator, a strided-convolution
discriminator with batch norm and LeakyReLU). The discriminator's step scores the generated images
without `.detach()`, so its backward runs on into the generator's graph, and the loop then calls
`d_loss.backward(retain_graph=True)`, the usual way to silence "Trying to backward through the
graph a second time" when the generator's step backpropagates through the same images. retain_graph
keeps every buffer of the discriminator step's graph (its passes over the real and the generated
batch) alive through the generator step, which makes a third discriminator pass with its own saved
activations: the first generator step runs out. `--detach-fake 1` scores `fake.detach()` in the
discriminator step and drops retain_graph.

    python3 gan_retain_graph.py --cap-gib G [--detach-fake 0|1] [--batch-size 128] [--steps 10]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--detach-fake", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--image-size", type=int, default=256)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
z_dim = 128


class Generator(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.start = size // 32
        self.project = torch.nn.Linear(z_dim, 512 * self.start * self.start)
        layers, c = [], 512
        for c_out in (512, 256, 128, 64):
            layers += [torch.nn.ConvTranspose2d(c, c_out, 4, stride=2, padding=1, bias=False),
                       torch.nn.BatchNorm2d(c_out), torch.nn.ReLU()]
            c = c_out
        layers += [torch.nn.ConvTranspose2d(c, 3, 4, stride=2, padding=1), torch.nn.Tanh()]
        self.net = torch.nn.Sequential(*layers)

    def forward(self, z):
        return self.net(self.project(z).view(-1, 512, self.start, self.start))


class Discriminator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [torch.nn.Conv2d(3, 64, 4, stride=2, padding=1), torch.nn.LeakyReLU(0.2)], 64
        for c_out in (128, 256, 512, 512):
            layers += [torch.nn.Conv2d(c, c_out, 4, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(c_out),
                       torch.nn.LeakyReLU(0.2)]
            c = c_out
        layers += [torch.nn.Conv2d(c, 1, 4), torch.nn.Flatten()]
        self.net = torch.nn.Sequential(*layers)

    def forward(self, images):
        return self.net(images).mean(dim=1)


G, D = Generator(args.image_size).cuda(), Discriminator().cuda()
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
ones = torch.ones(args.batch_size, device="cuda")
zeros = torch.zeros(args.batch_size, device="cuda")
for step in range(args.steps):
    real = torch.rand(args.batch_size, 3, args.image_size, args.image_size, device="cuda") * 2 - 1
    fake = G(torch.randn(args.batch_size, z_dim, device="cuda"))
    # The discriminator's step.
    scored = fake.detach() if args.detach_fake else fake
    d_loss = (F.binary_cross_entropy_with_logits(D(real), ones)
              + F.binary_cross_entropy_with_logits(D(scored), zeros))
    opt_d.zero_grad(set_to_none=True)
    if args.detach_fake:
        d_loss.backward()
    else:
        d_loss.backward(retain_graph=True)
    opt_d.step()
    # The generator's step.
    g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    print(f"step {step} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
