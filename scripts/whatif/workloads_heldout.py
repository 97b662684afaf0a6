"""Held-out PyTorch workloads for the what-if validation (run on an NVIDIA GPU).

Written after the replay model was built, and never used to tune it: they check that the model's
rules hold for programs it was not fitted on. Deterministic like workloads.py (seeded randomness,
no autotuning), except `streams_pipeline`, whose frees wait on other streams' work (GPU timing).
"""
import random

import torch

MiB = 1 << 20


def cnn_train(scale):
    """A small CNN trained with SGD+momentum on batches whose size changes every step."""
    torch.manual_seed(11)
    torch.backends.cudnn.benchmark = False
    rng = random.Random(11)
    width = max(8, int(64 * scale))
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2 * width, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(2 * width, 4 * width, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4 * width, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(int(14 * scale) or 3):
        batch = rng.choice([16, 32, 48, 64, 96])
        x = torch.randn(batch, 3, 128, 128, device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss


def random_lifetimes(scale):
    """Tensors of log-uniform sizes (4 KiB to 192 MiB) that live a random number of steps."""
    rng = random.Random(12)
    live = []
    for step in range(int(2500 * scale) or 100):
        size = int(2 ** rng.uniform(12, 27.6) * (scale if scale < 1 else 1))
        live.append((step + rng.randint(1, 60), torch.empty(max(size // 4, 1), device="cuda")))
        live = [(end, t) for end, t in live if end > step]


def mlp_grad_accum(scale):
    """An MLP trained with gradient accumulation over micro-batches of changing size, AdamW,
    and an evaluation pass with a large batch every few steps."""
    torch.manual_seed(13)
    rng = random.Random(13)
    d = int(2048 * scale) // 64 * 64 or 64
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, 4 * d), torch.nn.GELU(),
        torch.nn.Linear(4 * d, d),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(int(10 * scale) or 2):
        for micro in range(4):
            x = torch.randn(rng.choice([256, 512, 768, 1024]), d, device="cuda")
            (model(x).square().mean() / 4).backward()
            del x
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 3 == 2:
            with torch.no_grad():
                big = torch.randn(4096, d, device="cuda")
                model(big).sum().item()
                del big


def beam_search(scale):
    """Decoding with beams: per-token score tensors, a growing history gathered by the surviving
    beams (index_select), and the whole history dropped between requests."""
    torch.manual_seed(14)
    d = int(1024 * scale) // 64 * 64 or 64
    vocab = int(32000 * scale) or 1000
    proj = torch.randn(d, vocab, device="cuda") / d**0.5
    for request in range(int(3 * scale) or 1):
        beams = 8 * (request + 1)
        h = torch.randn(beams, d, device="cuda")
        history = torch.empty(beams, 0, d, device="cuda")
        for token in range(int(80 * scale) or 8):
            scores = h @ proj
            keep = scores.max(dim=1).values.topk(beams).indices
            history = torch.cat([history.index_select(0, keep), h.index_select(0, keep).unsqueeze(1)], dim=1)
            h = torch.tanh(history.mean(dim=1) + h)
            del scores, keep
        del history, h


def streams_pipeline(scale):
    """Three streams: a loader stream makes batches, a compute stream uses them (record_stream),
    the main stream reduces the results; frees wait on other streams' work."""
    rng = random.Random(15)
    load, compute = torch.cuda.Stream(), torch.cuda.Stream()
    n = int(1536 * scale) // 64 * 64 or 64
    results = []
    for step in range(int(50 * scale) or 5):
        with torch.cuda.stream(load):
            batch = torch.randn(n, n, device="cuda")
            extra = torch.empty(int(rng.choice([2, 8, 24, 40]) * MiB * scale) // 4 + 1, device="cuda")
        compute.wait_stream(load)
        with torch.cuda.stream(compute):
            batch.record_stream(compute)
            out = batch @ batch
        torch.cuda.current_stream().wait_stream(compute)
        out.record_stream(torch.cuda.current_stream())
        results.append(out.sum(dim=0))
        del batch, extra, out
        if len(results) > 8:
            results.pop(0)
        if step % 12 == 11:
            torch.cuda.synchronize()


WORKLOADS = {
    "cnn_train": cnn_train,
    "random_lifetimes": random_lifetimes,
    "mlp_grad_accum": mlp_grad_accum,
    "beam_search": beam_search,
    "streams_pipeline": streams_pipeline,
}
