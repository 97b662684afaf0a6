"""Training a Transformer translation model (12 + 12 layers, width 1024, a shared 32k
vocabulary; 386M parameters) that keeps the best checkpoint found so far for early stopping.

Scenario: a sequence-to-sequence training loop in the style of PyTorch's transfer-learning
tutorial: every `--eval-every` steps it scores a validation batch, and whenever the score
improves it keeps a snapshot of the weights and the optimizer state (to resume from, or to
restore at the end) with `copy.deepcopy({"model": model.state_dict(), "optimizer":
optimizer.state_dict()})`.

Mistake: deepcopy of GPU tensors copies them on the GPU. The snapshot is a second copy of the
385M float32 weights and of both AdamW moments, 4.6 GB that training never needed. Ten training
steps run fine; the first validation improves and the snapshot runs out of memory while copying
the optimizer state. `--snapshot-device cpu` copies the state to host memory instead (what the
snapshot is for); `--snapshot-optimizer 0` keeps only the weights.

Memory (fp32 with TF32 matmuls, batch 8 x 64 source and target tokens):
  parameters 385.6M x 4 B = 1.54 GB (P); gradients P; AdamW (fused) moments 2P.
  activations ~0.4 GB (24 layers, 512 + 512 tokens, 32k-token logits).
  cap_from (--snapshot-device cpu): the training step's peak, P + 2P + P + activations ~6.8 GB.
  own (gpu): at the first validation, gradients freed: P + 2P, + snapshot P (weights) + 2P
  (moments) = 6P = 9.2 GB, 1.35 x: fails in the deepcopy after 10 completed steps.

    python3 translation_best_deepcopy.py --cap-gib G [--snapshot-device gpu|cpu] [--snapshot-optimizer 1|0]
        [--batch-size 8] [--seq-len 128] [--layers 12] [--width 1024] [--steps 20] [--eval-every 10]
"""

import argparse
import copy

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--snapshot-device", default="gpu", choices=["gpu", "cpu"],
                    help="gpu: copy.deepcopy of the state dicts; cpu: copy every tensor to host memory")
parser.add_argument("--snapshot-optimizer", type=int, default=1, help="0: keep only the model weights")
parser.add_argument("--batch-size", type=int, default=8, help="sentence pairs per step")
parser.add_argument("--seq-len", type=int, default=64)
parser.add_argument("--layers", type=int, default=12, help="encoder layers (and as many decoder layers)")
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--vocab", type=int, default=32000)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--eval-every", type=int, default=10)
args = parse_args(parser)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
PAD = 0


class Seq2Seq(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(args.vocab, args.width, padding_idx=PAD)
        self.positions = torch.nn.Embedding(args.seq_len, args.width)
        self.transformer = torch.nn.Transformer(args.width, args.width // 64, args.layers, args.layers,
                                                4 * args.width, dropout=0.1, batch_first=True, norm_first=True)

    def forward(self, src, tgt_in):
        pos = self.positions.weight
        causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        h = self.transformer(self.embed(src) * args.width ** 0.5 + pos[: src.shape[1]],
                             self.embed(tgt_in) * args.width ** 0.5 + pos[: tgt_in.shape[1]],
                             tgt_mask=causal, tgt_is_causal=True)
        return h @ self.embed.weight.T  # output layer tied to the shared embedding


def snapshot(state):
    if args.snapshot_device == "gpu":
        return copy.deepcopy(state)
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: snapshot(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(v) for v in state)
    return copy.deepcopy(state)


def batch(generator):
    src = torch.randint(1, args.vocab, (args.batch_size, args.seq_len), device=DEVICE, generator=generator)
    tgt = torch.randint(1, args.vocab, (args.batch_size, args.seq_len + 1), device=DEVICE, generator=generator)
    return src, tgt


with DEVICE:
    model = Seq2Seq()
    torch.nn.init.normal_(model.embed.weight, std=args.width ** -0.5)  # fairseq's initialisation
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.98), weight_decay=0.01,
                              fused=DEVICE.type == "cuda")
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)
train_rng = torch.Generator(device=DEVICE).manual_seed(1)
best_score, best_state = float("-inf"), None
for step in range(1, args.steps + 1):
    model.train()
    src, tgt = batch(train_rng)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if step % args.eval_every == 0:
        model.eval()
        with torch.no_grad():
            src, tgt = batch(torch.Generator(device=DEVICE).manual_seed(1234))
            predicted = model(src, tgt[:, :-1]).argmax(dim=-1)
            score = (predicted == tgt[:, 1:]).float().mean().item() - loss.item() * 1e-3
        if score > best_score:
            best_score = score
            state = {"model": model.state_dict(), "step": step}
            if args.snapshot_optimizer:
                state["optimizer"] = optimizer.state_dict()
            best_state = snapshot(state)
            print(f"step {step}: validation score {score:.5f}, new best, snapshot kept ({args.snapshot_device})",
                  flush=True)
if best_state is not None:  # training ends on the best weights seen
    model.load_state_dict(best_state["model"])
finish(args.steps)
