"""DLRM click-through-rate training on Criteo-style data with the tables' gradients made dense.

Scenario: a recommendation model in the style of Facebook's DLRM reference: 13 dense features go
through a bottom MLP, 26 categorical features are looked up in 26 embedding tables (the Criteo
Kaggle hash sizes, 33.8M rows in all, 32 dimensions), their pairwise dot products feed a top MLP,
and the model is trained with plain SGD on batches of 2,048 impressions.

Mistake: the tables are built as `nn.EmbeddingBag(..., mode="sum")` with the default
sparse=False. A batch touches at most 2,048 rows of each table, but the backward pass of a dense
embedding writes a gradient as large as the whole table (zeros plus the touched rows), so the
first backward pass allocates a second copy of all 4.3 GB of tables and runs out of memory. The
DLRM reference builds them with sparse=True (`--sparse-grads 1`): each table's gradient is then a
sparse tensor of the touched rows only, which SGD applies directly.

Memory (fp32, embedding dim 32, batch 2,048):
  parameters: 33,762,577 table rows x 32 x 4 B = 4.32 GB, MLPs 0.9M parameters (3.6 MB).
  activations: a few MB (2,048 x 27 x 32 lookups, 2,048 x 512 MLP layers).
  cap_from (--sparse-grads 1): tables + sparse gradients (26 x 2,048 rows x 32 x 4 B = 7 MB plus
  their indices) and the update's coalescing temporaries: peak ~4.4 GB.
  own (0): the backward allocates each table's dense gradient: 4.32 GB more, 8.7 GB in all,
  > 1.3 x the cap (~4.6 GB): fails in the first backward pass, at the second of the big tables.

    python3 dlrm_dense_embedding_grad.py --cap-gib G [--sparse-grads 0|1] [--batch-size 2048]
        [--embedding-dim 32] [--max-ind-range 0] [--table-scale 1.0] [--steps 10]
"""

import argparse

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

# Criteo Kaggle (Display Advertising Challenge) categorical cardinalities, as in the DLRM reference.
CRITEO_KAGGLE_TABLE_SIZES = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                             3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                             142572]
DENSE_FEATURES = 13

parser = argparse.ArgumentParser()
parser.add_argument("--sparse-grads", type=int, default=0, help="1: nn.EmbeddingBag(sparse=True)")
parser.add_argument("--batch-size", type=int, default=2048)
parser.add_argument("--embedding-dim", type=int, default=32)
parser.add_argument("--max-ind-range", type=int, default=0,
                    help="hash every categorical feature into at most this many rows (0: the full tables)")
parser.add_argument("--table-scale", type=float, default=1.0, help="scale the table sizes (tests)")
parser.add_argument("--steps", type=int, default=10)
args = parse_args(parser)

torch.manual_seed(0)
table_sizes = [max(2, int(n * args.table_scale)) for n in CRITEO_KAGGLE_TABLE_SIZES]
if args.max_ind_range > 0:
    table_sizes = [min(n, args.max_ind_range) for n in table_sizes]


def mlp(widths):
    layers = []
    for i, (c_in, c_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(torch.nn.Linear(c_in, c_out))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, sizes, dim, sparse):
        super().__init__()
        self.bottom = mlp([DENSE_FEATURES, 512, 256, dim])
        self.tables = torch.nn.ModuleList([torch.nn.EmbeddingBag(n, dim, mode="sum", sparse=sparse) for n in sizes])
        for table in self.tables:  # the reference's uniform(-1/sqrt(n), 1/sqrt(n)) initialisation
            torch.nn.init.uniform_(table.weight, -(table.num_embeddings ** -0.5), table.num_embeddings ** -0.5)
        pairs = (len(sizes) + 1) * len(sizes) // 2
        self.top = mlp([dim + pairs, 512, 256, 1])
        rows, cols = torch.tril_indices(len(sizes) + 1, len(sizes) + 1, offset=-1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def forward(self, dense, categorical, offsets):
        x = self.bottom(dense)
        looked_up = [table(categorical[:, i], offsets) for i, table in enumerate(self.tables)]
        features = torch.stack([x] + looked_up, dim=1)              # [batch, 27, dim]
        interactions = features @ features.transpose(1, 2)          # [batch, 27, 27]
        flat = interactions[:, self.rows, self.cols]
        return self.top(torch.cat([x, flat], dim=1)).squeeze(1)


with DEVICE:  # the tables are made and initialised on the GPU, as the DLRM reference does
    model = DLRM(table_sizes, args.embedding_dim, bool(args.sparse_grads))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
table_bytes = sum(t.weight.numel() * t.weight.element_size() for t in model.tables)
print(f"{len(table_sizes)} tables, {sum(table_sizes):,} rows, {table_bytes / 2**30:.2f} GiB; "
      f"{'sparse' if args.sparse_grads else 'dense'} embedding gradients", flush=True)
sizes = torch.tensor(table_sizes, device=DEVICE)
offsets = torch.arange(args.batch_size, device=DEVICE)  # one id per feature per impression
for step in range(args.steps):
    dense = torch.log1p(torch.rand(args.batch_size, DENSE_FEATURES, device=DEVICE) * 100)
    # Categorical ids with a long tail: a few ids are very frequent, as in click logs.
    categorical = (torch.rand(args.batch_size, len(table_sizes), device=DEVICE) ** 4 * sizes).long()
    clicked = (torch.rand(args.batch_size, device=DEVICE) < 0.25).float()
    loss = F.binary_cross_entropy_with_logits(model(dense, categorical, offsets), clicked)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} log loss {loss.item():.4f}", flush=True)
finish(args.steps)
