"""Streaming speech recognition over long audio streams, chunk by chunk, with a stateful GRU
acoustic model whose hidden state is carried from one chunk to the next (truncated in time, as a
streaming recognizer runs). The model is put in eval() but the loop runs without torch.no_grad(),
so every chunk builds an autograd graph, and the carried hidden state links each chunk's graph to
the one before: no chunk's saved tensors are ever freed, and the chain grows by one chunk every
step. `--detach-state 1` carries `hidden.detach()` instead, which cuts the chain: each chunk's
graph then goes with its outputs.

    python3 stream_rnn_state.py --cap-gib G [--detach-state 0|1] [--streams 16] [--chunk-frames 100]
                                [--chunks 300]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--detach-state", type=int, default=0)
parser.add_argument("--streams", type=int, default=16, help="audio streams decoded together")
parser.add_argument("--chunk-frames", type=int, default=100, help="10 ms frames per chunk")
parser.add_argument("--chunks", type=int, default=300)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
features, width, vocab = 80, 1024, 16000


class Recognizer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.frontend = torch.nn.Sequential(torch.nn.Linear(features, 512), torch.nn.ReLU())
        self.rnn = torch.nn.GRU(512, width, num_layers=3, batch_first=True)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, frames, hidden):
        out, hidden = self.rnn(self.frontend(frames), hidden)
        return self.head(out).log_softmax(dim=-1), hidden


model = Recognizer().cuda().eval()
hidden = None
emitted = 0
for chunk in range(args.chunks):
    frames = torch.randn(args.streams, args.chunk_frames, features, device="cuda")
    log_probs, hidden = model(frames, hidden)
    if args.detach_state:
        hidden = hidden.detach()
    # Greedy CTC: a frame emits its token where it is not blank (0) and differs from the last one.
    tokens = log_probs.argmax(dim=-1)
    previous = F.pad(tokens, (1, 0), value=0)[:, :-1]
    emitted += int(((tokens != 0) & (tokens != previous)).sum())
    if chunk % 20 == 0:
        print(f"chunk {chunk} tokens emitted {emitted}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "chunks": args.chunks, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
