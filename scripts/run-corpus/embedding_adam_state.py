"""Fine-tuning a multilingual text classifier: a 250,002-token embedding table (as multilingual
encoders have), a small transformer encoder and a classification head, trained with AdamW. Each
batch uses a few thousand of the table's rows, but the embedding's gradient is dense and AdamW
keeps two state tensors as large as the whole table: after a forward and backward pass that fit,
the first `optimizer.step()` runs out making them. `--freeze-embeddings 1` trains the encoder and
head only, as fine-tuning recipes often do; `--optimizer sgd` keeps no state at all.

    python3 embedding_adam_state.py --cap-gib G [--optimizer adamw|sgd] [--freeze-embeddings 0|1]
                                    [--batch-size 32] [--steps 10]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
parser.add_argument("--freeze-embeddings", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
vocab, d_model, layers, classes, length = 250002, 768, 4, 20, 128
embed = torch.nn.Embedding(vocab, d_model, padding_idx=1).cuda()
layer = torch.nn.TransformerEncoderLayer(d_model, 12, 4 * d_model, dropout=0.0, batch_first=True,
                                         norm_first=True)
encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda()
head = torch.nn.Linear(d_model, classes).cuda()
if args.freeze_embeddings:
    embed.weight.requires_grad_(False)
parameters = [p for m in (embed, encoder, head) for p in m.parameters() if p.requires_grad]
print(f"training {sum(p.numel() for p in parameters) / 1e6:.1f}M parameters", flush=True)
if args.optimizer == "adamw":
    optimizer = torch.optim.AdamW(parameters, lr=2e-5, weight_decay=0.01)
else:
    optimizer = torch.optim.SGD(parameters, lr=1e-2)
for step in range(args.steps):
    # Token ids of one language: most of the table is never touched.
    tokens = torch.randint(2, 40000, (args.batch_size, length), device="cuda")
    labels = torch.randint(0, classes, (args.batch_size,), device="cuda")
    hidden = encoder(embed(tokens))
    loss = F.cross_entropy(head(hidden[:, 0]), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
