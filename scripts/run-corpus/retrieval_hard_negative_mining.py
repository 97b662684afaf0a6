"""Dense passage retrieval training (a DPR/ANCE-style bi-encoder) that re-mines hard negatives
over the whole corpus every few steps.

Scenario: a 6-layer, 768-wide text encoder (DistilBERT-sized, shared by queries and passages) is
trained with a contrastive loss over in-batch negatives plus one mined hard negative per query.
The corpus (32,768 passages of 128 tokens) and the 32,768 training queries (32 tokens) are kept
on the GPU as token ids; every `--refresh-every` steps the script re-encodes the corpus and the
queries without gradients and picks each query's hard negatives as the highest-scoring passages
other than its positive.

Mistake: the mining step scores every training query against every passage in one matrix
product, `scores = queries @ passages.T`, and takes the top-k of each row: a 32,768 x 32,768
float32 matrix (4 GiB) on top of the model, its optimizer state and the corpus embeddings. The
first ten training steps run; the first refresh runs out of memory. `--mine-chunk 1024` scores
1,024 queries at a time (as FAISS-style exact search does), keeping only each chunk's top-k.

Memory (training in bfloat16 autocast, fp32 weights):
  parameters 66.4M x 4 B = 0.27 GB, gradients 0.27 GB, AdamW state 0.53 GB.
  training step: 64 queries x 32 tokens and 128 passages x 128 tokens, ~0.6 GB of activations.
  refresh: corpus and query embeddings 2 x 32,768 x 768 x 4 B = 0.2 GB; encoding batches of 256
  x 128 tokens without gradients ~0.3 GB transient.
  cap_from (--mine-chunk 1024): 1,024 x 32,768 x 4 B = 0.13 GB per chunk: peak ~1.8 GB (training).
  own (0 = all at once): 0.8 + 0.2 + 4.3 GB = 5.3 GB, ~2.8 x: fails at the first refresh (step 10).

    python3 retrieval_hard_negative_mining.py --cap-gib G [--mine-chunk 0] [--batch-size 64]
        [--corpus 32768] [--queries 32768] [--refresh-every 10] [--steps 12] [--layers 6] [--width 768]
"""

import argparse

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--mine-chunk", type=int, default=0, help="queries scored at a time when mining (0: all)")
parser.add_argument("--batch-size", type=int, default=64, help="queries per training step")
parser.add_argument("--corpus", type=int, default=32768, help="passages")
parser.add_argument("--queries", type=int, default=32768, help="training queries")
parser.add_argument("--passage-len", type=int, default=128)
parser.add_argument("--query-len", type=int, default=32)
parser.add_argument("--hard-negatives", type=int, default=8, help="kept per query at each refresh")
parser.add_argument("--refresh-every", type=int, default=10)
parser.add_argument("--encode-batch", type=int, default=256)
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--width", type=int, default=768)
parser.add_argument("--vocab", type=int, default=30522)
parser.add_argument("--steps", type=int, default=12)
args = parse_args(parser)

torch.manual_seed(0)


class Layer(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.heads = width // 64
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm1 = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)
        self.norm2 = torch.nn.LayerNorm(width)

    def forward(self, x, pad):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])
        x = self.norm1(x + self.out(attn.transpose(1, 2).reshape(b, t, d)))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(args.vocab, args.width)
        self.positions = torch.nn.Embedding(512, args.width)
        self.norm = torch.nn.LayerNorm(args.width)
        self.layers = torch.nn.ModuleList([Layer(args.width) for _ in range(args.layers)])

    def forward(self, ids):
        pad = ids == 0
        x = self.norm(self.tokens(ids) + self.positions.weight[: ids.shape[1]])
        for layer in self.layers:
            x = layer(x, pad)
        return x[:, 0].float()  # the [CLS] vector


def text(n, length, generator):
    """Token ids with a [CLS] first and padding after a random length."""
    ids = torch.randint(1, args.vocab, (n, length), device=DEVICE, generator=generator)
    lengths = torch.randint(length // 2, length + 1, (n, 1), device=DEVICE, generator=generator)
    return ids.masked_fill(torch.arange(length, device=DEVICE)[None] >= lengths, 0)


@torch.no_grad()
def encode_all(ids):
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        return torch.cat([encoder(ids[i:i + args.encode_batch]) for i in range(0, ids.shape[0], args.encode_batch)])


@torch.no_grad()
def mine_hard_negatives():
    encoder.eval()
    passages = encode_all(corpus)
    queries = encode_all(query_ids)
    chunk = args.mine_chunk or queries.shape[0]
    hard = []
    for start in range(0, queries.shape[0], chunk):
        scores = queries[start:start + chunk] @ passages.T
        rows = torch.arange(scores.shape[0], device=DEVICE)
        scores[rows, positives[start:start + chunk]] = float("-inf")  # never the positive itself
        hard.append(scores.topk(args.hard_negatives, dim=1).indices)
    encoder.train()
    return torch.cat(hard)


data = torch.Generator(device=DEVICE).manual_seed(0)
corpus = text(args.corpus, args.passage_len, data)
query_ids = text(args.queries, args.query_len, data)
positives = torch.randint(0, args.corpus, (args.queries,), device=DEVICE, generator=data)
hard_negatives = torch.randint(0, args.corpus, (args.queries, args.hard_negatives), device=DEVICE, generator=data)
encoder = Encoder().to(DEVICE)
optimizer = torch.optim.AdamW(encoder.parameters(), lr=2e-5, weight_decay=0.01)
print(f"encoder {sum(p.numel() for p in encoder.parameters()) / 1e6:.1f}M parameters; {args.corpus} passages, "
      f"{args.queries} queries", flush=True)
for step in range(1, args.steps + 1):
    batch = torch.randint(0, args.queries, (args.batch_size,), device=DEVICE, generator=data)
    pick = torch.randint(0, args.hard_negatives, (args.batch_size, 1), device=DEVICE, generator=data)
    passage_ids = torch.cat([positives[batch], hard_negatives[batch].gather(1, pick).squeeze(1)])
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        q = encoder(query_ids[batch])
        p = encoder(corpus[passage_ids])
    scores = q @ p.T / 0.05  # [queries, positives + hard negatives]
    loss = F.cross_entropy(scores, torch.arange(args.batch_size, device=DEVICE))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if step % args.refresh_every == 0:
        hard_negatives = mine_hard_negatives()
        print(f"step {step}: mined {args.hard_negatives} hard negatives for {args.queries} queries", flush=True)
finish(args.steps)
