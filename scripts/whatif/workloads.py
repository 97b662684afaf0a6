"""Deterministic PyTorch workloads for the what-if ground truth (run on an NVIDIA GPU).

Each workload makes the same sequence of allocation requests whatever PYTORCH_CUDA_ALLOC_CONF
says (seeded randomness, no autotuning), so a trace recorded under one setting is the program
every other setting ran. `scale` shrinks them for the smoke run.
"""
import random

import torch

MiB = 1 << 20


def train_varlen(scale):
    """Training-like: an MLP over batches whose sequence length changes every step."""
    rng = random.Random(1)
    d = int(1024 * scale) // 64 * 64 or 64
    layers = torch.nn.Sequential(
        *[m for _ in range(4) for m in (torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))]
    ).cuda()
    opt = torch.optim.Adam(layers.parameters(), lr=1e-4)
    for step in range(int(30 * scale) or 3):
        length = rng.choice([512, 768, 1024, 1536, 2048, 3072])
        x = torch.randn(8, length, d, device="cuda")
        loss = layers(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss


def frag_longlived(scale):
    """Fragmentation-prone: long-lived tensors pin parts of segments while sizes change."""
    rng = random.Random(2)
    keep = []
    for phase in range(int(12 * scale) or 2):
        batch = []
        for i in range(40):
            mib = rng.choice([3, 7, 12, 25, 40, 66, 100])
            t = torch.empty(int(mib * MiB * scale) // 4 + 1, dtype=torch.float32, device="cuda")
            batch.append(t)
        # Every fifth tensor lives on; the rest die, leaving holes around the survivors.
        keep.extend(batch[::5])
        del batch
        big = [torch.empty(int(rng.choice([150, 220, 300]) * MiB * scale) // 4 + 1, device="cuda") for _ in range(6)]
        del big
        if len(keep) > 60:
            keep = keep[len(keep) // 3 :]


def two_streams(scale):
    """Two streams: tensors made on a side stream and used (record_stream) on the main one."""
    rng = random.Random(3)
    side = torch.cuda.Stream()
    n = int(2048 * scale) // 64 * 64 or 64
    main_tensors = []
    for step in range(int(60 * scale) or 5):
        with torch.cuda.stream(side):
            a = torch.randn(n, n, device="cuda")
            b = torch.empty(int(rng.choice([4, 16, 48]) * MiB * scale) // 4 + 1, device="cuda")
        torch.cuda.current_stream().wait_stream(side)
        a.record_stream(torch.cuda.current_stream())
        c = a @ a
        main_tensors.append(c)
        del a, b
        if len(main_tensors) > 6:
            main_tensors.pop(0)
        if step % 10 == 9:
            torch.cuda.synchronize()


def transformer_step(scale):
    """A real transformer training step (encoder stack, AdamW), a few iterations."""
    torch.manual_seed(4)
    d = int(1024 * scale) // 64 * 64 or 64
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d, nhead=16 if d >= 256 else 4, dim_feedforward=4 * d, batch_first=True),
        num_layers=4,
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(int(5 * scale) or 2):
        x = torch.randn(16, 512, d, device="cuda")
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss


def kv_cache(scale):
    """Inference with a growing KV cache: every generated token concatenates onto the cache."""
    torch.manual_seed(5)
    d = int(1024 * scale) // 64 * 64 or 64
    layers = 6
    w = [torch.randn(d, d, device="cuda") / d**0.5 for _ in range(layers)]
    for request in range(int(2 * scale) or 1):
        batch = 16
        cache_k = [torch.empty(batch, 0, d, device="cuda") for _ in range(layers)]
        cache_v = [torch.empty(batch, 0, d, device="cuda") for _ in range(layers)]
        h = torch.randn(batch, 1, d, device="cuda")
        for token in range(int(120 * scale) or 10):
            for i in range(layers):
                k = h @ w[i]
                cache_k[i] = torch.cat([cache_k[i], k], dim=1)
                cache_v[i] = torch.cat([cache_v[i], h], dim=1)
                att = torch.softmax(h @ cache_k[i].transpose(1, 2) / d**0.5, dim=-1)
                h = att @ cache_v[i]
        del cache_k, cache_v, h


def small_churn(scale):
    """Many small-pool tensors with the program's own empty_cache() calls between phases."""
    rng = random.Random(6)
    live = []
    for phase in range(int(8 * scale) or 2):
        for i in range(int(600 * scale) or 50):
            kib = rng.choice([1, 4, 16, 64, 256, 512, 1000])
            live.append(torch.empty(kib * 256, device="cuda"))
            if len(live) > 300:
                del live[rng.randrange(len(live))]
        mid = [torch.empty(int(rng.choice([2, 6, 9]) * MiB) // 4, device="cuda") for _ in range(20)]
        del mid
        live = live[::2]
        torch.cuda.empty_cache()


WORKLOADS = {
    "train_varlen": train_varlen,
    "frag_longlived": frag_longlived,
    "two_streams": two_streams,
    "transformer_step": transformer_step,
    "kv_cache": kv_cache,
    "small_churn": small_churn,
}
