"""Real PyTorch runs whose allocator snapshots `vramscope compare` is tested on (issue 33).

Each workload writes its snapshots and a truth file (what the program knows about itself: the
line that leaks and how many bytes a step, the bytes of parameters, gradients and optimizer
state, which rank does the most work) into OUT_DIR. Run on a GPU machine:

    python3 scripts/compare/workloads.py OUT_DIR leak|batch|fix|rank [ARGS]

(`scripts/compare/run_gpu.sh` runs them all.) The models are small so that the snapshots stay a
few hundred kilobytes and can be committed as fixtures (tests/fixtures/compare/).
"""

import json
import os
import pickle
import sys
import time

import torch

# Enough entries for every event of these short runs, parameters' allocations included, so that
# the snapshot at any step can tell what each live block is.
MAX_ENTRIES = 200_000


def record():
    torch.cuda.memory._record_memory_history(enabled="all", max_entries=MAX_ENTRIES, context="all", stacks="python")


def dump(path):
    snapshot = torch.cuda.memory._snapshot()
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    return os.path.getsize(path)


def model(width, layers):
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)]
    return torch.nn.Sequential(*blocks).cuda()


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def sizes(net, optimizer):
    params = list(net.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.is_cuda]
    return {
        "parameter_bytes": tensor_bytes(params),
        "gradient_bytes": tensor_bytes([p.grad for p in params if p.grad is not None]),
        "optimizer_state_bytes": tensor_bytes(state),
        "parameter_count": sum(p.numel() for p in params),
    }


def stats():
    s = torch.cuda.memory_stats()
    return {k: s.get(k) for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current")}


def write_truth(out_dir, name, truth):
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)


def step(net, optimizer, batch, width):
    x = torch.randn(batch, width, device="cuda")
    out = net(x)
    loss = out.square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out, loss


def leak(out_dir):
    """Periodic snapshots of one process whose live set grows by one call site a step."""
    record()
    width, batch = 512, 256
    net = model(width, 2)
    optimizer = torch.optim.Adam(net.parameters())
    kept = []
    snapshots = []
    for i in range(1, 9):
        out, _ = step(net, optimizer, batch, width)
        kept.append(out.detach().clone())  # LEAK: every step keeps its output
        if i % 2 == 0:
            path = os.path.join(out_dir, f"leak_step{i}.pickle")
            snapshots.append({"file": os.path.basename(path), "step": i, "size": dump(path)})
    torch.cuda.synchronize()
    import inspect

    source, first = inspect.getsourcelines(leak)
    line = first + next(i for i, text in enumerate(source) if "# LEAK" in text)
    write_truth(out_dir, "leak.truth.json", {
        "leak_file": "workloads.py",
        "leak_line": line,
        "leak_function": "leak",
        "bytes_per_step": batch * width * 4,
        "steps_between_snapshots": 2,
        "snapshots": snapshots,
        "stats": stats(),
        **sizes(net, optimizer),
    })


def batch(out_dir, size):
    """The same model and optimizer at one batch size: snapshot after three steps."""
    record()
    width = 512
    net = model(width, 2)
    optimizer = torch.optim.Adam(net.parameters())
    for _ in range(3):
        step(net, optimizer, size, width)
    # A fourth step stopped right after backward, so that the gradients are alive too.
    x = torch.randn(size, width, device="cuda")
    loss = net(x).square().mean()
    loss.backward()
    torch.cuda.synchronize()
    path = os.path.join(out_dir, f"batch{size}.pickle")
    file_size = dump(path)
    write_truth(out_dir, f"batch{size}.truth.json", {
        "batch": size,
        "file": os.path.basename(path),
        "size": file_size,
        "stats": stats(),
        **sizes(net, optimizer),
    })


def fix(out_dir, variant):
    """`total_loss += loss` (keeps every step's graph) against `total_loss += loss.item()`."""
    record()
    width, size = 512, 256
    net = model(width, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    total_loss = 0
    for _ in range(6):
        x = torch.randn(size, width, device="cuda")
        loss = net(x).square().mean()
        if variant == "before":
            total_loss += loss  # keeps the autograd graph of every step alive
        else:
            total_loss += loss.item()
        # No backward: an evaluation loop, the classic form of this bug.
    torch.cuda.synchronize()
    path = os.path.join(out_dir, f"fix_{variant}.pickle")
    file_size = dump(path)
    write_truth(out_dir, f"fix_{variant}.truth.json", {
        "variant": variant,
        "file": os.path.basename(path),
        "size": file_size,
        "stats": stats(),
        **sizes(net, optimizer),
    })


def rank(out_dir, rank_index, size):
    """One rank of a job whose ranks have different shares of the work (batch sizes)."""
    record()
    width = 512
    net = model(width, 2)
    optimizer = torch.optim.Adam(net.parameters())
    for _ in range(3):
        step(net, optimizer, size, width)
    torch.cuda.synchronize()
    path = os.path.join(out_dir, f"rank{rank_index}.pickle")
    file_size = dump(path)
    write_truth(out_dir, f"rank{rank_index}.truth.json", {
        "rank": rank_index,
        "batch": size,
        "file": os.path.basename(path),
        "size": file_size,
        "stats": stats(),
        **sizes(net, optimizer),
    })


if __name__ == "__main__":
    out_dir, what = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    started = time.time()
    if what == "leak":
        leak(out_dir)
    elif what == "batch":
        batch(out_dir, int(sys.argv[3]))
    elif what == "fix":
        fix(out_dir, sys.argv[3])
    elif what == "rank":
        rank(out_dir, int(os.environ.get("RANK", sys.argv[3])), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown workload {what}")
    print(f"{what} {' '.join(sys.argv[3:])}: {time.time() - started:.1f} s", flush=True)
