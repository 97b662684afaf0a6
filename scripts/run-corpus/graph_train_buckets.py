"""A transformer language model trained with its whole training step (forward, backward and a
capturable AdamW step) captured as a CUDA graph, one graph per sequence-length bucket (1024 and
768 tokens), each captured into its own private memory pool (the default) and replayed for that
bucket's batches. Every --eval-every steps a validation pass runs eagerly over a larger batch,
while both graphs' pools hold a training step's activations and gradients each.
`--share-pool 1` captures both graphs into one pool (the longest bucket first), which is safe
since they never run at the same time.

    python3 graph_train_buckets.py --cap-gib G [--share-pool 0|1] [--batch-size 8]
                                   [--eval-batch-size 48] [--steps 40] [--eval-every 20]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--share-pool", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--eval-batch-size", type=int, default=48)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--eval-every", type=int, default=20)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
vocab, d_model, depth, buckets = 8192, 1024, 6, [1024, 768]


class LanguageModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, 16, 4 * d_model, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.body = torch.nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens, mask):
        return self.head(self.body(self.embed(tokens), mask=mask, is_causal=True))


model = LanguageModel().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
masks = {n: torch.nn.Transformer.generate_square_subsequent_mask(n, device="cuda") for n in buckets}


def train_step(tokens, mask):
    logits = model(tokens[:, :-1], mask)
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return loss.detach()


graphs = {}
pool = None
for length in buckets:  # longest first
    static_tokens = torch.randint(0, vocab, (args.batch_size, length + 1), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up, as graph capture needs (it also makes AdamW's state)
            optimizer.zero_grad(set_to_none=True)
            train_step(static_tokens, masks[length])
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)  # the graph's backward makes its own gradients
    torch.cuda.empty_cache()  # the warm-up's cached blocks go back before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        static_loss = train_step(static_tokens, masks[length])
    if args.share_pool:
        pool = graph.pool()
    graphs[length] = (graph, static_tokens, static_loss)
    print(f"captured the training step for {length} tokens", flush=True)


def validate():
    """Validation loss over one larger batch of the longest bucket (dropout is 0: no eval mode)."""
    with torch.no_grad():
        tokens = torch.randint(0, vocab, (args.eval_batch_size, buckets[0] + 1), device="cuda")
        logits = model(tokens[:, :-1], masks[buckets[0]])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item()


for step in range(args.steps):
    length = buckets[step % len(buckets)]
    graph, static_tokens, static_loss = graphs[length]
    static_tokens.copy_(torch.randint(0, vocab, static_tokens.shape, device="cuda"))
    graph.replay()
    print(f"step {step} length {length} loss {static_loss.item():.4f}", flush=True)
    if (step + 1) % args.eval_every == 0:
        print(f"step {step} validation loss {validate():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
