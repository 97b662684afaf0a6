"""A fourth held-out set of PyTorch workloads for the what-if validation (run on an NVIDIA GPU).

Written on 2026-12-04, after the replay's drawn placements learnt the driver's 32 MiB chunks
(their released space and the top no segment had), and run once to check the replay on programs
none of its rules were found on: message passing on random graphs of changing size (gathers and
`index_add_` over irregular edge lists), spectrograms of signals of changing length through
`torch.stft` (cuFFT) into a small conv net, a GAN whose generator and discriminator train in
turns with two optimizers, training that keeps every step's predictions on the GPU and
concatenates them every few steps, and inference of a transformer encoder under
`inference_mode` on padded batches of changing shape. Deterministic (seeded randomness, no
autotuning); all on one stream.
"""
import random

import torch
import torch.nn.functional as F


def gnn_scatter(scale):
    """Message passing on random graphs whose node and edge counts change every step: every
    layer gathers both ends of each edge, concatenates them and sums the messages into the
    nodes with `index_add_`, so tensor sizes follow the graph."""
    torch.manual_seed(41)
    rng = random.Random(41)
    d = int(128 * scale) // 32 * 32 or 32
    layers = torch.nn.ModuleList(torch.nn.Linear(2 * d, d) for _ in range(4)).cuda()
    head = torch.nn.Linear(d, 10).cuda()
    opt = torch.optim.Adam(list(layers.parameters()) + list(head.parameters()), lr=1e-3)
    for step in range(int(12 * scale) or 3):
        nodes = rng.choice([5000, 10000, 20000, 30000])
        edges = nodes * rng.choice([4, 8])
        h = torch.randn(nodes, d, device="cuda")
        src = torch.randint(0, nodes, (edges,), device="cuda")
        dst = torch.randint(0, nodes, (edges,), device="cuda")
        for layer in layers:
            messages = layer(torch.cat([h[src], h[dst]], 1))
            summed = torch.zeros_like(h).index_add_(0, dst, messages)
            h = F.relu(summed) + h
        labels = torch.randint(0, 10, (nodes,), device="cuda")
        loss = F.cross_entropy(head(h), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del h, src, dst, messages, summed, labels, loss


def stft_classifier(scale):
    """Audio-like classification: batches of signals whose length changes every step, turned
    into log spectrograms by `torch.stft` (cuFFT plans and their work areas), then a small 2-D
    conv net."""
    torch.manual_seed(42)
    rng = random.Random(42)
    c = int(32 * scale) // 8 * 8 or 8
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, c, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(c, 2 * c, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(2 * c, 20),
    ).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    window = torch.hann_window(512, device="cuda")
    for step in range(int(12 * scale) or 3):
        batch = rng.choice([16, 32, 48])
        seconds = rng.choice([1, 2, 4])
        wave = torch.randn(batch, 16000 * seconds, device="cuda")
        spec = torch.stft(wave, 512, hop_length=256, window=window, return_complex=True)
        spec = spec.abs().log1p().unsqueeze(1)
        labels = torch.randint(0, 20, (batch,), device="cuda")
        loss = F.cross_entropy(net(spec), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del wave, spec, labels, loss


def gan_alternating(scale):
    """A DCGAN on 64x64 images: the discriminator's step on real and detached fake batches,
    then the generator's through the discriminator, with two Adam optimizers; batches of
    changing size."""
    torch.manual_seed(43)
    rng = random.Random(43)
    z, c = 128, int(64 * scale) // 16 * 16 or 16
    generator = torch.nn.Sequential(
        torch.nn.Linear(z, 4 * 4 * 8 * c),
        torch.nn.Unflatten(1, (8 * c, 4, 4)),
        torch.nn.ConvTranspose2d(8 * c, 4 * c, 4, 2, 1),
        torch.nn.BatchNorm2d(4 * c),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(4 * c, 2 * c, 4, 2, 1),
        torch.nn.BatchNorm2d(2 * c),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(2 * c, c, 4, 2, 1),
        torch.nn.BatchNorm2d(c),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(c, 3, 4, 2, 1),
        torch.nn.Tanh(),
    ).cuda()
    discriminator = torch.nn.Sequential(
        torch.nn.Conv2d(3, c, 4, 2, 1),
        torch.nn.LeakyReLU(0.2),
        torch.nn.Conv2d(c, 2 * c, 4, 2, 1),
        torch.nn.LeakyReLU(0.2),
        torch.nn.Conv2d(2 * c, 4 * c, 4, 2, 1),
        torch.nn.LeakyReLU(0.2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * c * 8 * 8, 1),
    ).cuda()
    opt_g = torch.optim.Adam(generator.parameters(), 2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminator.parameters(), 2e-4, betas=(0.5, 0.999))
    for step in range(int(16 * scale) or 4):
        batch = rng.choice([64, 128, 256, 512])
        real = torch.randn(batch, 3, 64, 64, device="cuda")
        fake = generator(torch.randn(batch, z, device="cuda"))
        ones = torch.ones(batch, 1, device="cuda")
        zeros = torch.zeros(batch, 1, device="cuda")
        d_loss = F.binary_cross_entropy_with_logits(
            discriminator(real), ones
        ) + F.binary_cross_entropy_with_logits(discriminator(fake.detach()), zeros)
        opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        opt_d.step()
        g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), ones)
        opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        opt_g.step()
        del real, fake, ones, zeros, d_loss, g_loss


def prediction_history(scale):
    """Training that keeps every step's predictions on the GPU for evaluation: the softmax of
    each batch (of changing size) is appended to a list, and every sixth step the list is
    concatenated into a per-class mean and cleared, so long-lived tensors of changing size lie
    between the temporaries."""
    torch.manual_seed(44)
    rng = random.Random(44)
    d = int(1024 * scale) // 64 * 64 or 64
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d),
        torch.nn.GELU(),
        torch.nn.Linear(4 * d, d),
        torch.nn.GELU(),
        torch.nn.Linear(d, 1000),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kept, means = [], []
    for step in range(int(36 * scale) or 6):
        batch = rng.choice([512, 1024, 2048, 3072])
        x = torch.randn(batch, d, device="cuda")
        logits = model(x)
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(logits.detach().softmax(1))
        if step % 6 == 5:
            means.append(torch.cat(kept).mean(0))
            kept.clear()
        del x, logits, labels, loss


def encoder_inference(scale):
    """Inference of a 6-layer transformer encoder under `inference_mode` on padded batches
    whose size and longest sequence change every call, with a key padding mask (PyTorch's
    fast path, nested tensors where it takes them)."""
    torch.manual_seed(45)
    rng = random.Random(45)
    d = int(512 * scale) // 64 * 64 or 64
    layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=True).cuda().eval()
    pooled = []
    with torch.inference_mode():
        for step in range(int(30 * scale) or 5):
            batch = rng.choice([8, 16, 32, 64])
            longest = rng.choice([128, 256, 512, 1024])
            lengths = [rng.randint(longest // 4, longest) for _ in range(batch)]
            x = torch.randn(batch, longest, d, device="cuda")
            positions = torch.arange(longest, device="cuda")[None, :]
            pad = positions >= torch.tensor(lengths, device="cuda")[:, None]
            out = encoder(x, src_key_padding_mask=pad)
            pooled.append(out.sum(1).mean(0))
            del x, positions, pad, out


WORKLOADS = {
    "gnn_scatter": gnn_scatter,
    "stft_classifier": stft_classifier,
    "gan_alternating": gan_alternating,
    "prediction_history": prediction_history,
    "encoder_inference": encoder_inference,
}
