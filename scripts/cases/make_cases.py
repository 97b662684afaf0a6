#!/usr/bin/env python3
"""Makes the real diagnosis corpus on an NVIDIA GPU with PyTorch (run on the H200).

Each case runs in its own Python process and leaves in OUTDIR:
  <case>.log           what the training script printed (stdout + stderr, with the traceback)
  <case>.pickle        an allocator snapshot (at the OOM, from the OOM observer, or at the end)
  <case>.truth.json    torch.cuda.memory_stats() taken at the same moment as the snapshot
  <case>.smi.csv       nvidia-smi's process list at that moment
  <case>.expected.json the cause we built into the case: primary category + first recommendation
Usage: python3 make_cases.py OUTDIR [case ...]
"""
import json
import os
import subprocess
import sys
import time

CASES = {
    "other_process": {
        "category": "other-process",
        "first_recommendation": "free-other-process",
        "why": "another process holds ~125 GiB of the 140 GiB card; the job itself is modest",
    },
    "batch_too_large": {
        "category": "capacity",
        "first_recommendation": "reduce-batch-size",
        "why": "activations of an MLP grow with the batch size until live tensors fill the card",
    },
    "fragmentation": {
        "category": "fragmentation",
        "first_recommendation": "expandable-segments",
        "why": "half of every 2 GiB segment is free but split, so a 1.5 GiB request cannot fit",
    },
    "memory_cap": {
        "category": "memory-cap",
        "first_recommendation": "raise-memory-fraction",
        "why": "set_per_process_memory_fraction(0.1) caps the process at ~14 GiB",
    },
    "leak": {
        "category": "leak",
        "first_recommendation": "fix-leak",
        "why": "every step keeps a 256 MiB output (with its graph) in a Python list",
    },
    "healthy": {
        "category": "healthy",
        "first_recommendation": "none",
        "why": "a steady training loop; memory flat after the first step",
    },
}

PRELUDE = r'''
import json, os, subprocess, sys, time, torch
OUT = sys.argv[1]; CASE = sys.argv[2]
torch.cuda.memory._record_memory_history(max_entries=3000)
dev = torch.device("cuda:0")
GiB = 1 << 30
def save(tag=CASE):
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(os.path.join(OUT, tag + ".pickle"))
    with open(os.path.join(OUT, tag + ".truth.json"), "w") as f:
        json.dump(dict(torch.cuda.memory_stats(dev)), f, indent=1, sort_keys=True)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
                         capture_output=True, text=True).stdout
    with open(os.path.join(OUT, tag + ".smi.csv"), "w") as f:
        f.write(smi)
    print(f"[vramscope-case] saved snapshot {tag} at {time.time():.3f}", flush=True)
saved_at_oom = []
def on_oom(device, alloc, device_alloc, device_free):
    if not saved_at_oom:
        saved_at_oom.append(1)
        save()
torch._C._cuda_attach_out_of_memory_observer(on_oom)
'''

BODIES = {
    "other_process": r'''
hog = subprocess.Popen([sys.executable, "-c",
    "import torch,time; x=torch.empty(125*(1<<30), dtype=torch.uint8, device='cuda'); "
    "print('hog ready', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
hog.stdout.readline()
print(f"another process (pid {hog.pid}) holds 125 GiB", flush=True)
try:
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)]).to(dev)
    x = torch.randn(65536, 8192, device=dev)
    for step in range(5):
        y = model(x).sum(); y.backward()
        print(f"step {step} allocated {torch.cuda.memory_allocated()/GiB:.2f} GiB", flush=True)
finally:
    hog.kill()
''',
    "batch_too_large": r'''
model = torch.nn.Sequential(*[torch.nn.Linear(16384, 16384) for _ in range(6)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batch = 4096
while True:
    x = torch.randn(batch, 16384, device=dev)
    loss = model(x).square().mean(); loss.backward(); opt.step(); opt.zero_grad()
    print(f"batch {batch} ok, peak {torch.cuda.max_memory_allocated()/GiB:.2f} GiB", flush=True)
    del x, loss
    batch *= 2
''',
    "fragmentation": r'''
def fill_with(nbytes):
    out = []
    try:
        while True:
            out.append(torch.empty(nbytes, dtype=torch.uint8, device=dev))
    except torch.OutOfMemoryError:
        pass
    return out
segments = fill_with(2 * GiB)          # the card in 2 GiB segments
n = len(segments)
pad = fill_with(64 << 20)              # the rest of the card, so the driver has < 64 MiB free
del segments                           # all 2 GiB segments cached, unsplit
halves = [torch.empty(GiB, dtype=torch.uint8, device=dev) for _ in range(2 * n)]  # split every segment
keep = halves[0::2]; del halves        # every segment: 1 GiB allocated + 1 GiB free (split, unreleasable)
print(f"{n} segments; reserved {torch.cuda.memory_reserved()/GiB:.1f} GiB, allocated {torch.cuda.memory_allocated()/GiB:.1f} GiB", flush=True)
saved_at_oom.clear()
x = torch.empty(int(1.5 * GiB), dtype=torch.uint8, device=dev)
''',
    "memory_cap": r'''
torch.cuda.set_per_process_memory_fraction(0.1, dev)
model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).to(dev)
acts = []
for step in range(1000):
    acts.append(model(torch.randn(8192, 8192, device=dev)))
    print(f"step {step} allocated {torch.cuda.memory_allocated()/GiB:.2f} GiB", flush=True)
''',
    "leak": r'''
model = torch.nn.Linear(8192, 8192).to(dev)
history = []
for step in range(40):
    x = torch.randn(8192, 8192, device=dev)
    out = model(x)
    loss = out.square().mean()
    loss.backward()
    history.append(out)  # the leak: keeps every step's 256 MiB output and its graph alive
    print(f"step {step} allocated {torch.cuda.memory_allocated()/GiB:.2f} GiB reserved {torch.cuda.memory_reserved()/GiB:.2f} GiB", flush=True)
    if step == 9:
        save(CASE + "_step10")
    time.sleep(0.05)
save()
''',
    "healthy": r'''
model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).to(dev)
opt = torch.optim.AdamW(model.parameters())
for step in range(30):
    x = torch.randn(4096, 8192, device=dev)
    loss = model(x).square().mean(); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} allocated {torch.cuda.memory_allocated()/GiB:.2f} GiB", flush=True)
save()
''',
}


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    os.makedirs(out, exist_ok=True)
    for name in names:
        script = os.path.join(out, f"_{name}.py")
        with open(script, "w") as f:
            f.write(PRELUDE + BODIES[name])
        start = time.time()
        with open(os.path.join(out, f"{name}.log"), "w") as log:
            rc = subprocess.run([sys.executable, script, out, name], stdout=log, stderr=subprocess.STDOUT).returncode
        os.remove(script)
        expected = dict(CASES[name], case=name, exit_code=rc)
        with open(os.path.join(out, f"{name}.expected.json"), "w") as f:
            json.dump(expected, f, indent=1)
        print(f"{name}: exit {rc} in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
