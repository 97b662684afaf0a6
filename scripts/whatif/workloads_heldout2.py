"""A second held-out set of PyTorch workloads for the what-if validation (run on an NVIDIA GPU).

Written on 2026-12-02, after every rule of the replay model was in place, and run once: like
workloads_heldout.py they check the model on programs it was not fitted on, with patterns the
first two sets lack: activation checkpointing under bf16 autocast, a U-Net's skip connections,
mixture-of-experts routing with changing expert batches, a leak (losses kept with their graphs)
and an inference server that swaps models with `torch.cuda.empty_cache()` between them.
Deterministic (seeded randomness, no autotuning); all on one stream.
"""
import os
import random

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MiB = 1 << 20


def ckpt_transformer(scale):
    """A transformer encoder trained with activation checkpointing per layer under bf16
    autocast, AdamW, on batches whose sequence length changes every step.

    VRAMSCOPE_CKPT_REENTRANT=1 uses the reentrant checkpoint, VRAMSCOPE_CKPT_AUTOCAST=0 runs
    in fp32: the first run on the H200 (PyTorch 2.11) failed in every setting inside backward
    with the non-reentrant one under autocast while the history was recorded, so the run that
    made the ground truth says which variant it used (doctor/go.sh, `ckpt_variant.txt`)."""
    reentrant = os.environ.get("VRAMSCOPE_CKPT_REENTRANT", "0") == "1"
    autocast = os.environ.get("VRAMSCOPE_CKPT_AUTOCAST", "1") == "1"
    torch.manual_seed(21)
    rng = random.Random(21)
    d = int(512 * scale) // 64 * 64 or 64
    layers = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True) for _ in range(6)
    ).cuda()
    opt = torch.optim.AdamW(layers.parameters(), lr=1e-4)
    for step in range(int(12 * scale) or 3):
        seq = rng.choice([128, 256, 384, 512])
        x = torch.randn(16, seq, d, device="cuda", requires_grad=reentrant)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            h = x
            for layer in layers:
                h = checkpoint(layer, h, use_reentrant=reentrant)
            loss = h.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, h, loss


def unet_segment(scale):
    """A small U-Net (skip connections concatenated on the way up, bilinear upsampling,
    batch norm) trained on images whose size changes between steps."""
    torch.manual_seed(22)
    # The ground truth runs cuDNN's heuristics; VRAMSCOPE_CUDNN_BENCHMARK=1 runs its benchmark
    # search instead (a probe of how PyTorch catches a failed workspace there).
    torch.backends.cudnn.benchmark = os.environ.get("VRAMSCOPE_CUDNN_BENCHMARK") == "1"
    rng = random.Random(22)
    w = max(8, int(32 * scale))

    def block(cin, cout):
        return torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(),
        )

    down = torch.nn.ModuleList([block(3, w), block(w, 2 * w), block(2 * w, 4 * w)]).cuda()
    up = torch.nn.ModuleList([block(6 * w, 2 * w), block(3 * w, w)]).cuda()
    head = torch.nn.Conv2d(w, 4, 1).cuda()
    params = list(down.parameters()) + list(up.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    for step in range(int(10 * scale) or 3):
        side = rng.choice([128, 192, 256])
        x = torch.randn(8, 3, side, side, device="cuda")
        target = torch.randint(0, 4, (8, side, side), device="cuda")
        skips = []
        h = x
        for i, b in enumerate(down):
            h = b(h)
            if i < len(down) - 1:
                skips.append(h)
                h = F.max_pool2d(h, 2)
        for b in up:
            h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            h = b(torch.cat([h, skips.pop()], dim=1))
        loss = F.cross_entropy(head(h), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, target, h, loss, skips


def moe_routing(scale):
    """A mixture-of-experts layer trained with top-2 routing: each expert gets a different,
    changing number of tokens (index_select in, index_add_ out)."""
    torch.manual_seed(23)
    d = int(1024 * scale) // 64 * 64 or 64
    experts = 8
    gate = torch.nn.Linear(d, experts).cuda()
    w_in = torch.nn.Parameter(torch.randn(experts, d, 4 * d, device="cuda") / d**0.5)
    w_out = torch.nn.Parameter(torch.randn(experts, 4 * d, d, device="cuda") / (4 * d) ** 0.5)
    opt = torch.optim.SGD([w_in, w_out, *gate.parameters()], lr=1e-3, momentum=0.9)
    rng = random.Random(23)
    for step in range(int(16 * scale) or 4):
        tokens = rng.choice([2048, 4096, 6144, 8192])
        x = torch.randn(tokens, d, device="cuda")
        weights, chosen = gate(x).softmax(dim=-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e in range(experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            h = F.gelu(x.index_select(0, rows) @ w_in[e]) @ w_out[e]
            out = out.index_add(0, rows, h * weights[rows, slot].unsqueeze(1))
        loss = out.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, weights, chosen, out, loss


def leak_history(scale):
    """The classic leak: a training loop that keeps every step's loss tensor, and with it the
    step's autograd graph and saved activations, in a list (`losses.append(loss)` instead of
    `loss.item()`); no backward on the kept ones."""
    torch.manual_seed(24)
    rng = random.Random(24)
    d = int(1024 * scale) // 64 * 64 or 64
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.ReLU(), torch.nn.Linear(4 * d, d),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    losses = []
    for step in range(int(40 * scale) or 5):
        x = torch.randn(rng.choice([512, 1024, 1536]), d, device="cuda")
        loss = model(x).square().mean()
        if step % 4 == 0:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            losses.append(loss)  # the leak: the graph and its activations stay alive
        del x


def model_swap_empty_cache(scale):
    """An inference server that loads a model, answers batches of changing size, unloads it,
    calls torch.cuda.empty_cache(), and loads the next model of another shape."""
    torch.manual_seed(25)
    rng = random.Random(25)
    for cycle, (d, depth) in enumerate([(2048, 6), (3072, 4), (1536, 10), (2560, 5)]):
        d = int(d * scale) // 64 * 64 or 64
        weights = [torch.randn(d, d, device="cuda") for _ in range(depth)]
        with torch.no_grad():
            for request in range(int(6 * scale) or 2):
                h = torch.randn(rng.choice([64, 256, 1024, 2048]), d, device="cuda")
                for w in weights:
                    h = torch.relu(h @ w)
                h.sum().item()
                del h
        del weights
        torch.cuda.empty_cache()


WORKLOADS = {
    "ckpt_transformer": ckpt_transformer,
    "unet_segment": unet_segment,
    "moe_routing": moe_routing,
    "leak_history": leak_history,
    "model_swap_empty_cache": model_swap_empty_cache,
}
