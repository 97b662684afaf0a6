"""Domain-adversarial training (DANN): a convolutional feature extractor feeds a label classifier
and, through a gradient-reversal layer (a custom `torch.autograd.Function` that flips the sign of
the gradient), a domain classifier. For a plot of how strongly the domain classifier pushes back,
the reversal layer's backward keeps every step's incoming gradient in a module-level list, a
feature map's worth of float32 per step, on the GPU and never dropped. `--log-grad norm` keeps
each step's gradient norm (a 0-dimensional tensor) instead.

    python3 grad_reversal_log.py --cap-gib G [--log-grad tensor|norm] [--batch-size 64] [--steps 200]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--log-grad", default="tensor", choices=["tensor", "norm"])
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--image-size", type=int, default=128)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
REVERSED_GRADS = []  # for the end-of-run plot of the adversarial gradient


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strength):
        ctx.strength = strength
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        REVERSED_GRADS.append(grad_output if args.log_grad == "tensor" else grad_output.norm())
        return -ctx.strength * grad_output, None


def conv_block(c_in, c_out, stride):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                               torch.nn.BatchNorm2d(c_out), torch.nn.ReLU())


features = torch.nn.Sequential(conv_block(3, 64, 2), conv_block(64, 64, 1), conv_block(64, 128, 2),
                               conv_block(128, 128, 1)).cuda()  # 128 channels at 1/4 resolution
label_head = torch.nn.Sequential(conv_block(128, 256, 2), conv_block(256, 256, 2),
                                 torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                 torch.nn.Linear(256, 31)).cuda()
domain_head = torch.nn.Sequential(conv_block(128, 128, 2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                  torch.nn.Linear(128, 2)).cuda()
parameters = [*features.parameters(), *label_head.parameters(), *domain_head.parameters()]
optimizer = torch.optim.SGD(parameters, lr=1e-2, momentum=0.9, weight_decay=5e-4)
half = args.batch_size // 2
size = args.image_size
for step in range(args.steps):
    # Half the batch from the labelled source domain, half from the unlabelled target domain.
    images = torch.randn(args.batch_size, 3, size, size, device="cuda")
    labels = torch.randint(0, 31, (half,), device="cuda")
    domains = torch.cat([torch.zeros(half), torch.ones(args.batch_size - half)]).long().cuda()
    strength = 2.0 / (1.0 + torch.exp(torch.tensor(-10.0 * step / args.steps)).item()) - 1.0
    f = features(images)
    class_loss = F.cross_entropy(label_head(f[:half]), labels)
    domain_loss = F.cross_entropy(domain_head(GradReverse.apply(f, strength)), domains)
    (class_loss + domain_loss).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 20 == 0:
        print(f"step {step} class loss {class_loss.item():.4f} domain loss {domain_loss.item():.4f} "
              f"gradients logged {len(REVERSED_GRADS)}", flush=True)
if REVERSED_GRADS:
    norms = torch.stack([g.norm() if g.dim() else g for g in REVERSED_GRADS])
    print(f"mean reversed-gradient norm {norms.mean().item():.3e}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
