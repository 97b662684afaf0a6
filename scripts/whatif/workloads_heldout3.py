"""A third held-out set of PyTorch workloads for the what-if validation (run on an NVIDIA GPU).

Written on 2026-12-03, after the replay learnt where the driver puts segments made after a
release (released address space reused, fresh space below the live segments, the same place for
a segment of another size made at the same request), and run once to check those rules on
programs they were not found on: a vision transformer on images of changing size through
`scaled_dot_product_attention`, an LSTM on variable-length batches (cuDNN's RNN workspace),
fp16 training with a gradient scaler and gradient clipping over many differently sized
parameters, batched generation whose batch shrinks as sequences finish while their KV caches
grow, and a recommendation model with a large embedding table and batches of changing size.
Deterministic (seeded randomness, no autotuning); all on one stream.
"""
import random

import torch
import torch.nn.functional as F

MiB = 1 << 20


def vit_patches(scale):
    """A small vision transformer trained on images whose side changes every step, so the
    number of patches (the sequence) changes; attention through scaled_dot_product_attention."""
    torch.manual_seed(31)
    rng = random.Random(31)
    d, heads, patch = int(384 * scale) // 64 * 64 or 64, 6, 16
    embed = torch.nn.Conv2d(3, d, patch, stride=patch).cuda()
    blocks = torch.nn.ModuleList(
        torch.nn.ModuleDict(
            {
                "norm1": torch.nn.LayerNorm(d),
                "qkv": torch.nn.Linear(d, 3 * d),
                "proj": torch.nn.Linear(d, d),
                "norm2": torch.nn.LayerNorm(d),
                "mlp": torch.nn.Sequential(
                    torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
                ),
            }
        )
        for _ in range(6)
    ).cuda()
    head = torch.nn.Linear(d, 100).cuda()
    params = list(embed.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for step in range(int(10 * scale) or 3):
        side = rng.choice([224, 288, 384])
        batch = rng.choice([16, 24, 32])
        x = torch.randn(batch, 3, side, side, device="cuda")
        labels = torch.randint(0, 100, (batch,), device="cuda")
        h = embed(x).flatten(2).transpose(1, 2)
        n = h.shape[1]
        for b in blocks:
            q, k, v = b["qkv"](b["norm1"](h)).view(batch, n, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
            h = h + b["proj"](a.transpose(1, 2).reshape(batch, n, d))
            h = h + b["mlp"](b["norm2"](h))
        loss = F.cross_entropy(head(h.mean(1)), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, h, loss, q, k, v, a


def lstm_varlen(scale):
    """A two-layer LSTM language model trained on batches of packed sequences whose lengths
    change every step (cuDNN's RNN kernels and their workspace)."""
    torch.manual_seed(32)
    rng = random.Random(32)
    vocab, d = 8000, int(512 * scale) // 64 * 64 or 64
    emb = torch.nn.Embedding(vocab, d).cuda()
    lstm = torch.nn.LSTM(d, d, num_layers=2, batch_first=True).cuda()
    out = torch.nn.Linear(d, vocab).cuda()
    params = list(emb.parameters()) + list(lstm.parameters()) + list(out.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    for step in range(int(12 * scale) or 3):
        batch = rng.choice([32, 48, 64])
        longest = rng.choice([64, 128, 192, 256])
        lengths = sorted((rng.randint(longest // 4, longest) for _ in range(batch)), reverse=True)
        lengths[0] = longest
        tokens = torch.randint(0, vocab, (batch, longest), device="cuda")
        packed = torch.nn.utils.rnn.pack_padded_sequence(emb(tokens), lengths, batch_first=True)
        h, _ = lstm(packed)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, batch_first=True)
        loss = F.cross_entropy(out(h).flatten(0, 1), tokens.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del tokens, packed, h, loss


def amp_grad_clip(scale):
    """fp16 training with a gradient scaler and gradient-norm clipping over a model whose
    parameters have many different sizes (a tapering MLP with per-layer biases and norms), on
    batches of changing size."""
    torch.manual_seed(33)
    rng = random.Random(33)
    widths = [int(w * scale) // 64 * 64 or 64 for w in (4096, 3072, 2304, 1536, 1024, 768, 512)]
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.LayerNorm(b), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    for step in range(int(14 * scale) or 3):
        batch = rng.choice([512, 1024, 2048, 3072])
        x = torch.randn(batch, widths[0], device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        del x, y, loss


def shrinking_generation(scale):
    """Batched greedy generation with a per-layer KV cache grown by concatenation; sequences
    that finish leave the batch, so the caches are re-gathered smaller."""
    torch.manual_seed(34)
    rng = random.Random(34)
    d, layers, heads = int(1024 * scale) // 64 * 64 or 64, 8, 16
    weights = [
        (torch.randn(d, 3 * d, device="cuda") / d**0.5, torch.randn(d, d, device="cuda") / d**0.5)
        for _ in range(layers)
    ]
    with torch.no_grad():
        for request in range(int(3 * scale) or 1):
            batch = rng.choice([48, 64])
            prompt = rng.choice([256, 512])
            finish = torch.tensor([rng.randint(32, 256) for _ in range(batch)], device="cuda")
            h = torch.randn(batch, prompt, d, device="cuda")
            caches = [None] * layers
            for t in range(int(256 * scale) or 8):
                for i, (wqkv, wo) in enumerate(weights):
                    q, k, v = (h @ wqkv).chunk(3, dim=-1)
                    if caches[i] is not None:
                        k = torch.cat([caches[i][0], k], dim=1)
                        v = torch.cat([caches[i][1], v], dim=1)
                    caches[i] = (k, v)
                    split = lambda z: z.view(z.shape[0], z.shape[1], heads, -1).transpose(1, 2)
                    a = F.scaled_dot_product_attention(split(q), split(k), split(v))
                    h = a.transpose(1, 2).reshape(h.shape[0], -1, d) @ wo
                h = h[:, -1:, :]
                alive = finish > t
                if not bool(alive.all()):
                    keep = alive.nonzero().squeeze(1)
                    if keep.numel() == 0:
                        break
                    finish = finish[keep]
                    h = h[keep]
                    caches = [(k[keep], v[keep]) for k, v in caches]
            del h, caches, finish


def embedding_recsys(scale):
    """A recommendation model: a large embedding table looked up with embedding_bag for
    batches of changing size and bag length, an MLP on top, sparse-free Adam training."""
    torch.manual_seed(35)
    rng = random.Random(35)
    rows, d = int(400_000 * scale) or 1000, 128
    table = torch.nn.EmbeddingBag(rows, d, mode="sum").cuda()
    mlp = torch.nn.Sequential(
        torch.nn.Linear(d, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256),
        torch.nn.ReLU(), torch.nn.Linear(256, 1),
    ).cuda()
    opt = torch.optim.Adam(list(table.parameters()) + list(mlp.parameters()), lr=1e-3)
    for step in range(int(12 * scale) or 3):
        batch = rng.choice([4096, 8192, 16384])
        bag = rng.choice([8, 20, 40])
        ids = torch.randint(0, rows, (batch * bag,), device="cuda")
        offsets = torch.arange(0, batch * bag, bag, device="cuda")
        y = torch.rand(batch, 1, device="cuda")
        loss = F.binary_cross_entropy_with_logits(mlp(table(ids, offsets)), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del ids, offsets, y, loss


WORKLOADS = {
    "vit_patches": vit_patches,
    "lstm_varlen": lstm_varlen,
    "amp_grad_clip": amp_grad_clip,
    "shrinking_generation": shrinking_generation,
    "embedding_recsys": embedding_recsys,
}
