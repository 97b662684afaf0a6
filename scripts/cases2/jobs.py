#!/usr/bin/env python3
"""The jobs of the second real-case corpus: small, real PyTorch programs with one built-in cause
each (see cases.py for what each case is). The orchestrators (run_oom.py, run_live.py) start one
process per run:

    PYTORCH_CUDA_ALLOC_CONF=... python3 jobs.py JOB --result R.json [--params-json '{...}']
        [--cap-bytes N] [--card-bytes N] [--batch-scale F] [--seq-scale F] [--fix]
        [--history MAX_ENTRIES] [--snapshot-dir DIR --name NAME] [--wait-go] [--duration-s S]

--wait-go: import torch, then wait for a line "go" on stdin before touching the GPU (the
orchestrator starts the next job while the previous one still runs, so the import is hidden).
--cap-bytes: torch.cuda.set_per_process_memory_fraction(cap / total) before any allocation.
--card-bytes: the smoke mode's "virtual card", applied the same way.
The job writes R.json at the end: outcome (completed / oom / error), where it was (phase, steps),
the failing request (from the OOM observer), memory_stats peaks, the parameters it resolved at
run time (re-runs get them back so every re-run does the same work), timings.
With --snapshot-dir, it records allocator history (--history > 0) and writes NAME.pickle at the
first OOM (from the OOM observer) or at the end, with NAME.memstats.json beside it.
"""
import argparse
import json
import os
import sys
import time
import traceback

T0 = time.time()
GiB = 1 << 30
MiB = 1 << 20


def log(msg):
    print(f"[case2 +{time.time() - T0:7.2f}s] {msg}", flush=True)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job")
    ap.add_argument("--result", required=True)
    ap.add_argument("--params-json", default="{}")
    ap.add_argument("--cap-bytes", type=int)
    ap.add_argument("--card-bytes", type=int)
    ap.add_argument("--batch-scale", type=float, default=1.0)
    ap.add_argument("--seq-scale", type=float, default=1.0)
    ap.add_argument("--fix", action="store_true")
    ap.add_argument("--history", type=int, default=0)
    ap.add_argument("--snapshot-dir")
    ap.add_argument("--name")
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--duration-s", type=float, default=0.0)
    return ap.parse_args(argv)


ARGS = parse_args(sys.argv[1:])
P = json.loads(ARGS.params_json)
STATE = {"phase": "start", "steps": 0, "snapshots": [], "extra": {}}
RESOLVED = {}
OOM = {}

t_import = time.time()
import torch  # noqa: E402  (timed, and after the arguments so --help needs no torch)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMPORT_S = time.time() - t_import

if ARGS.wait_go:
    line = sys.stdin.readline().strip()
    if line != "go":
        print(f"[case2] no 'go' on stdin (got {line!r}); exiting without touching the GPU", flush=True)
        sys.exit(3)
T_GO = time.time()

dev = torch.device("cuda:0")
t_init = time.time()
FREE_AT_START, TOTAL = torch.cuda.mem_get_info(dev)
PROPS = torch.cuda.get_device_properties(dev)
LIMIT = None
for limit in (ARGS.cap_bytes, ARGS.card_bytes):
    if limit and (LIMIT is None or limit < LIMIT):
        LIMIT = limit
if LIMIT:
    torch.cuda.set_per_process_memory_fraction(min(1.0, LIMIT / TOTAL), dev)
torch.set_float32_matmul_precision("high")
INIT_S = time.time() - t_init


def phase(name):
    STATE["phase"] = name


def snapshot_path(tag=None):
    if not ARGS.snapshot_dir:
        return None
    base = ARGS.name + (f".{tag}" if tag else "")
    return os.path.join(ARGS.snapshot_dir, base)


def save_snapshot(tag=None):
    """Writes NAME[.tag].pickle and NAME[.tag].memstats.json (allocator snapshot + memory_stats)."""
    base = snapshot_path(tag)
    if base is None:
        return
    torch.cuda.memory._dump_snapshot(base + ".pickle")
    with open(base + ".memstats.json", "w") as f:
        json.dump(dict(torch.cuda.memory_stats(dev)), f, indent=1, sort_keys=True)
    STATE["snapshots"].append({"tag": tag, "file": os.path.basename(base + ".pickle"),
                               "phase": STATE["phase"], "steps_completed": STATE["steps"],
                               "t_s": round(time.time() - T_GO, 3)})
    log(f"saved snapshot {os.path.basename(base)}.pickle")


def on_oom(device, alloc, limit_bytes, device_free):
    if OOM:
        return
    OOM.update({"device": int(device), "requested_bytes": int(alloc),
                "limit_bytes": int(limit_bytes), "device_free_bytes": int(device_free),
                "phase": STATE["phase"], "steps_completed": STATE["steps"],
                "t_s": round(time.time() - T_GO, 3)})
    save_snapshot()


if ARGS.snapshot_dir and ARGS.history > 0:
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                             max_entries=ARGS.history)
torch._C._cuda_attach_out_of_memory_observer(on_oom)


# ------------------------------------------------------------------------------------ helpers
def avail_bytes():
    """What this process may still reserve: the driver's free memory, or what is left under the
    cap / virtual card."""
    free, _ = torch.cuda.mem_get_info(dev)
    if LIMIT:
        free = min(free, LIMIT - torch.cuda.memory_reserved(dev))
    return max(0, int(free))


def align(nbytes, unit=2 * MiB):
    return max(unit, int(nbytes) // unit * unit)


def empty(nbytes):
    return torch.empty(max(1, int(nbytes)), dtype=torch.uint8, device=dev)


def resolve(key, compute):
    """A parameter computed at run time (from the free memory) unless given: the original run
    resolves it, re-runs get the same value back through --params-json."""
    if not P.get(key):
        P[key] = compute()
    RESOLVED[key] = P[key]
    return P[key]


def mem_line():
    return (f"allocated {torch.cuda.memory_allocated(dev) / GiB:.2f} GiB, "
            f"reserved {torch.cuda.memory_reserved(dev) / GiB:.2f} GiB")


def scaled(n, factor, minimum=1):
    return max(minimum, int(round(n * factor)))


class Block(nn.Module):
    """A pre-LayerNorm transformer block (attention + 4x MLP)."""

    def __init__(self, d, heads, dtype):
        super().__init__()
        kw = {"device": dev, "dtype": dtype}
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, **kw)
        self.qkv = nn.Linear(d, 3 * d, **kw)
        self.proj = nn.Linear(d, d, **kw)
        self.ln2 = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, 4 * d, **kw)
        self.fc2 = nn.Linear(4 * d, d, **kw)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def transformer(layers, d, heads, dtype):
    return nn.ModuleList([Block(d, heads, dtype) for _ in range(layers)])


def forward_layers(blocks, x, verbose):
    for i, block in enumerate(blocks):
        x = block(x)
        if verbose:
            log(f"  layer {i} done, {mem_line()}")
    return x


def dtype_of(name):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def mlp(layers, d, dtype=torch.float32):
    return nn.ModuleList([nn.Linear(d, d, device=dev, dtype=dtype) for _ in range(layers)])


def sgd_step(params, lr=1e-4):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
                p.grad = None


# --------------------------------------------------------------------------------------- jobs
def job_transformer_train():
    """Trains a transformer; warm_steps at `seq`, then `steps` at `long_seq` (or `seq`)."""
    dtype = dtype_of(P["dtype"])
    batch = scaled(P["batch"], ARGS.batch_scale)
    seq, long_seq = P["seq"], P["long_seq"]
    if long_seq:
        long_seq = scaled(long_seq, ARGS.seq_scale, 16)
    else:
        seq = scaled(seq, ARGS.seq_scale, 16)
    schedule = [seq] * P["warm_steps"] + [long_seq or seq] * P["steps"]
    phase("model")
    blocks = transformer(P["layers"], P["d_model"], P["heads"], dtype)
    params = list(blocks.parameters())
    n_params = sum(p.numel() for p in params)
    log(f"model: {P['layers']} layers, d={P['d_model']}, {n_params / 1e9:.2f} G parameters "
        f"({P['dtype']}), {mem_line()}")
    opt = torch.optim.SGD(params, lr=1e-4)
    for step, t in enumerate(schedule):
        phase(f"step {step} data")
        x = torch.randn(batch, t, P["d_model"], device=dev, dtype=dtype)
        log(f"step {step}: batch {batch} x {t} tokens, {mem_line()}")
        phase(f"step {step} forward")
        y = forward_layers(blocks, x, verbose=True)
        loss = y.float().square().mean() if dtype == torch.float32 else y.square().mean()
        phase(f"step {step} backward")
        loss.backward()
        phase(f"step {step} optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        STATE["steps"] = step + 1
        log(f"step {step} done: loss {loss.item():.4f}, peak "
            f"{torch.cuda.max_memory_allocated(dev) / GiB:.2f} GiB, {mem_line()}")
        del x, y, loss


def job_mlp_capacity_backward():
    """A ReLU MLP whose batch is 1/10.5 of the free memory per activation: the forward pass fits,
    the backward pass of the first step needs one activation more than the card has."""
    d = P["d_model"]
    rows = resolve("rows", lambda: int(avail_bytes() * P["rows_fraction_of_free"] / (d * 4))
                   // 1024 * 1024)
    rows = scaled(rows, ARGS.batch_scale, 1024)
    phase("model")
    layers = mlp(P["layers"], d)
    log(f"MLP {P['layers']} x {d}, batch {rows} rows ({rows * d * 4 / GiB:.2f} GiB per activation)")
    for step in range(P["steps"]):
        phase(f"step {step} data")
        h = torch.randn(rows, d, device=dev)
        phase(f"step {step} forward")
        for i, lin in enumerate(layers):
            h = torch.relu(lin(h))
            log(f"  layer {i} done, {mem_line()}")
        loss = h.mean()
        phase(f"step {step} backward")
        loss.backward()
        phase(f"step {step} optimizer")
        sgd_step(layers.parameters())
        torch.cuda.synchronize()
        STATE["steps"] = step + 1
        log(f"step {step} done, peak {torch.cuda.max_memory_allocated(dev) / GiB:.2f} GiB")
        del h, loss


def job_mlp_no_grad():
    """Batch inference that forgot torch.no_grad(); --fix runs it under torch.inference_mode()."""
    d = P["d_model"]
    rows = resolve("rows", lambda: int(avail_bytes() * P["rows_fraction_of_free"] / (d * 2))
                   // 1024 * 1024)
    rows = scaled(rows, ARGS.batch_scale, 1024)
    phase("model")
    layers = mlp(P["layers"], d, torch.bfloat16)
    log(f"MLP {P['layers']} x {d} bf16, batch {rows} rows "
        f"({rows * d * 2 / GiB:.2f} GiB per activation), fix={ARGS.fix}")
    for batch in range(2):
        phase(f"batch {batch} forward")
        with torch.inference_mode(ARGS.fix):
            h = torch.randn(rows, d, device=dev, dtype=torch.bfloat16)
            for i, lin in enumerate(layers):
                h = torch.relu(lin(h))
                log(f"  layer {i} done, {mem_line()}")
            score = h.float().mean().item()
        STATE["steps"] = batch + 1
        log(f"batch {batch} done, score {score:.4f}")
        del h


def job_mlp_train():
    """Plain MLP training, `steps` steps of `rows` rows."""
    d = P["d_model"]
    rows = scaled(P["rows"], ARGS.batch_scale, 64)
    phase("model")
    layers = mlp(P["layers"], d)
    log(f"MLP {P['layers']} x {d}, batch {rows} rows ({rows * d * 4 / GiB:.2f} GiB per activation), "
        f"free at start {FREE_AT_START / GiB:.2f} GiB")
    for step in range(P["steps"]):
        phase(f"step {step} forward")
        h = torch.randn(rows, d, device=dev)
        for lin in layers:
            h = torch.relu(lin(h))
        loss = h.square().mean()
        phase(f"step {step} backward")
        loss.backward()
        phase(f"step {step} optimizer")
        sgd_step(layers.parameters())
        torch.cuda.synchronize()
        STATE["steps"] = step + 1
        log(f"step {step} done: loss {loss.item():.4f}, peak "
            f"{torch.cuda.max_memory_allocated(dev) / GiB:.2f} GiB")
        del h, loss


def job_frag_halves():
    """Fill the card (or cap) with segments, free them, split each with two halves, keep one."""
    s = ARGS.batch_scale
    seg = align(P["segment_bytes"])
    count = resolve("count", lambda: max(1, (avail_bytes() - P["leave_free_bytes"]
                                             - P["count_slack_bytes"]) // seg))
    phase("fill")
    segments = [empty(align(seg * s)) for _ in range(count)]
    pad_bytes = resolve("pad_bytes", lambda: align(max(0, avail_bytes() - P["leave_free_bytes"])))
    pad = empty(align(pad_bytes * s)) if pad_bytes * s >= 2 * MiB else None
    log(f"phase 1: {count} buffers of {align(seg * s) / MiB:.0f} MiB + pad "
        f"{(pad.numel() if pad is not None else 0) / MiB:.0f} MiB, {mem_line()}")
    del segments
    phase("split")
    half = align(seg * s / 2)
    halves = [empty(half) for _ in range(2 * count)]
    keep = halves[0::2]
    del halves
    log(f"phase 2: kept {len(keep)} buffers of {half / MiB:.0f} MiB, {mem_line()}")
    phase("request")
    request = empty(align(seg * s * P["request_fraction"]))
    request.zero_()
    STATE["steps"] = 1
    log(f"request of {request.numel() / MiB:.0f} MiB served, {mem_line()}")
    del request, keep, pad


def job_frag_small():
    """Large cached blocks split by many small buffers, every second one kept."""
    s = ARGS.batch_scale
    big = align(P["big_bytes"])
    big_count = resolve("big_count", lambda: max(1, (avail_bytes() - P["big_slack_bytes"]) // big))
    phase("fill")
    bigs = [empty(align(big * s)) for _ in range(big_count)]
    tail_bytes = resolve("tail_bytes", lambda: align(max(0, avail_bytes() - P["tail_slack_bytes"])))
    tail = empty(align(tail_bytes * s)) if tail_bytes * s >= 2 * MiB else None
    log(f"phase 1: {big_count} buffers of {align(big * s) / MiB:.0f} MiB + tail, {mem_line()}")
    del bigs, tail
    small = P["small_bytes"]
    small_count = resolve("small_count", lambda: int(
        (big_count * big + tail_bytes + avail_bytes() - P["small_slack_bytes"]) // small))
    phase("small buffers")
    smalls = [empty(small * s) for _ in range(small_count)]
    keep = smalls[0::2]
    del smalls
    log(f"phase 2: kept {len(keep)} of {small_count} buffers of {small * s / MiB:.1f} MiB, "
        f"{mem_line()}")
    phase("request")
    request = empty(align(P["request_bytes"] * s))
    request.zero_()
    STATE["steps"] = 1
    log(f"request of {request.numel() / MiB:.0f} MiB served, {mem_line()}")
    del request, keep


def job_two_streams():
    """A side-stream prefetcher (record_stream) owns the cached memory the main stream needs."""
    s = ARGS.batch_scale
    staging = align(P["staging_bytes"])
    count = resolve("count", lambda: max(1, (avail_bytes() - P["leave_free_bytes"]
                                             - P["count_slack_bytes"]) // staging))
    main = torch.cuda.current_stream(dev)
    side = main if ARGS.fix else torch.cuda.Stream(dev)
    # Load the kernels used below before the card is full: CUDA loads modules lazily, and a
    # module load with no free memory left fails as "CUDA error: out of memory".
    with torch.cuda.stream(side):
        torch.ones(1, device=dev).fill_(1).add_(1)
    torch.ones(1, device=dev).fill_(1).add_(1)
    torch.cuda.synchronize()
    phase("staging")
    with torch.cuda.stream(side):
        buffers = [empty(align(staging * s)) for _ in range(count)]
        pad_bytes = resolve("pad_bytes", lambda: align(max(0, avail_bytes() - P["leave_free_bytes"])))
        pad = empty(align(pad_bytes * s)) if pad_bytes * s >= 2 * MiB else None
        log(f"staging: {count} buffers of {align(staging * s) / MiB:.0f} MiB on the "
            f"{'main' if ARGS.fix else 'side'} stream, {mem_line()}")
        del buffers
        phase("prefetch")
        batches = []
        for _ in range(2 * count):
            b = empty(align(P["batch_bytes"] * s))
            b.fill_(1)
            batches.append(b)
    main.wait_stream(side)
    phase("consume")
    for b in batches:
        if not ARGS.fix:
            b.record_stream(main)
        b.add_(1)
    keep = batches[0::2]
    del batches, b
    log(f"prefetch: kept {len(keep)} batches of {align(P['batch_bytes'] * s) / MiB:.0f} MiB, "
        f"{mem_line()}")
    phase("train step")
    act = empty(align(P["activation_bytes"] * s))
    act.zero_()
    torch.cuda.synchronize()
    STATE["steps"] = 1
    log(f"activation of {act.numel() / MiB:.0f} MiB served on the main stream, {mem_line()}")
    del act, keep, pad


def job_growth():
    """An evaluation loop that keeps every step's output on the GPU (--fix keeps a summary)."""
    step_elems = int(P["step_bytes"] * ARGS.batch_scale) // 4
    work_elems = max(step_elems, int(P["work_bytes"] * ARGS.batch_scale) // 4)
    outputs = []
    for step in range(P["steps"]):
        phase(f"step {step}")
        w = torch.randn(work_elems, device=dev)
        out = w[:step_elems] * 2.0
        outputs.append(out.mean() if ARGS.fix else out)
        del w, out
        STATE["steps"] = step + 1
        if step % 50 == 0:
            log(f"step {step}: {mem_line()}")
    phase("metric")
    metric = torch.stack([o.mean() for o in outputs]).mean().item()
    log(f"metric {metric:.4f} over {len(outputs)} steps, {mem_line()}")


def job_leak_oom():
    """A training loop that appends every step's output to a list (--fix keeps loss.item())."""
    d = P["d_model"]
    rows = scaled(P["rows"], ARGS.batch_scale, 64)
    lin = nn.Linear(d, d, device=dev)
    kept = []
    for step in range(P["steps"]):
        phase(f"step {step}")
        x = torch.randn(rows, d, device=dev)
        out = lin(x)
        loss = out.square().mean()
        loss.backward()
        sgd_step(lin.parameters())
        kept.append(loss.item() if ARGS.fix else out)
        del x, out, loss
        STATE["steps"] = step + 1
        if step % 20 == 0:
            log(f"step {step}: {mem_line()}")
    log(f"done: {P['steps']} steps, {mem_line()}")


def job_kv_cache():
    """Decoding-style inference whose per-layer KV cache grows with torch.cat."""
    d, heads, layers = P["d_model"], P["heads"], P["layers"]
    hd = d // heads
    batch = scaled(P["batch"], ARGS.batch_scale)
    max_tokens = scaled(P["max_tokens"], ARGS.seq_scale, P["chunk"])
    dt = torch.bfloat16
    phase("model")
    w_qkv = [torch.randn(d, 3 * d, device=dev, dtype=dt) * d ** -0.5 for _ in range(layers)]
    w_o = [torch.randn(d, d, device=dev, dtype=dt) * d ** -0.5 for _ in range(layers)]
    cache_k = [None] * layers
    cache_v = [None] * layers
    log(f"KV cache of {layers} layers, batch {batch}, up to {max_tokens} tokens "
        f"({2 * layers * d * 2 * batch / MiB:.1f} MiB per token)")
    tokens = 0
    step = 0
    with torch.inference_mode():
        x = torch.randn(batch, P["chunk"], d, device=dev, dtype=dt)
        while tokens < max_tokens:
            n = min(P["chunk"], max_tokens - tokens)
            phase(f"step {step} ({tokens} tokens cached)")
            h = x[:, :n]
            for layer in range(layers):
                qkv = (h @ w_qkv[layer]).view(batch, n, 3, heads, hd).permute(2, 0, 3, 1, 4)
                q, k, v = qkv.unbind(0)
                if cache_k[layer] is None:
                    cache_k[layer], cache_v[layer] = k.contiguous(), v.contiguous()
                else:
                    cache_k[layer] = torch.cat([cache_k[layer], k], dim=2)
                    cache_v[layer] = torch.cat([cache_v[layer], v], dim=2)
                a = F.scaled_dot_product_attention(q[:, :, -1:], cache_k[layer], cache_v[layer])
                h = h + a.transpose(1, 2).reshape(batch, 1, d) @ w_o[layer]
                del qkv, q, k, v, a
            tokens += n
            step += 1
            STATE["steps"] = step
            log(f"step {step}: {tokens} tokens cached, {mem_line()}")
    torch.cuda.synchronize()


def job_healthy():
    """A steady bf16 transformer training loop with AdamW; snapshot at the end."""
    blocks = transformer(P["layers"], P["d_model"], P["heads"], torch.bfloat16)
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
    for step in range(P["steps"]):
        phase(f"step {step}")
        x = torch.randn(P["batch"], P["seq"], P["d_model"], device=dev, dtype=torch.bfloat16)
        loss = forward_layers(blocks, x, verbose=False).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        STATE["steps"] = step + 1
        log(f"step {step}: loss {loss.item():.4f}, {mem_line()}")
        del x, loss
    torch.cuda.synchronize()
    save_snapshot()


def job_leak_no_oom():
    """Validation without no_grad, `total_loss = total_loss + loss` (keeps every graph)."""
    layers = mlp(P["layers"], P["d_model"], torch.bfloat16)
    total_loss = 0.0
    for batch in range(P["batches"]):
        phase(f"batch {batch}")
        h = torch.randn(P["rows"], P["d_model"], device=dev, dtype=torch.bfloat16)
        for lin in layers:
            h = torch.relu(lin(h))
        loss = h.float().square().mean()
        total_loss = total_loss + (loss.item() if ARGS.fix else loss)
        del h, loss
        STATE["steps"] = batch + 1
        log(f"batch {batch}: {mem_line()}")
        if batch + 1 == P["first_snapshot"]:
            save_snapshot(f"batch{batch + 1}")
    log(f"validation loss {float(total_loss) / P['batches']:.4f}")
    torch.cuda.synchronize()
    save_snapshot()


def job_hog():
    """Another process that holds GPU memory until stdin closes (or 300 s): `bytes`, or
    `fraction_of_total` of the card, or all but `leave_free_bytes` of what is free."""
    if P.get("bytes"):
        nbytes = P["bytes"]
    elif P.get("fraction_of_total"):
        nbytes = int(TOTAL * P["fraction_of_total"])
    else:
        nbytes = avail_bytes() - P["leave_free_bytes"]
    RESOLVED["bytes"] = align(nbytes)
    held = empty(align(nbytes))
    held.fill_(1)
    torch.cuda.synchronize()
    print(f"HOG READY pid {os.getpid()} bytes {held.numel()} held", flush=True)
    STATE["steps"] = 1
    import select
    select.select([sys.stdin], [], [], P.get("max_s", 300))
    del held


def paced(duration_s, per_second):
    """Yields step numbers at `per_second` steps a second for `duration_s` seconds."""
    start = time.time()
    step = 0
    while True:
        now = time.time()
        if now - start >= duration_s:
            return
        yield step, now - start
        step += 1
        delay = start + step / per_second - time.time()
        if delay > 0:
            time.sleep(delay)


def job_live_leak():
    """Keeps a `keep_bytes` output per step, `steps_per_s` steps a second, for the duration."""
    lin = nn.Linear(1024, 1024, device=dev)
    rows = max(1, P["keep_bytes"] // (1024 * 4))
    kept = []
    last_print = -1
    first_done = False
    for step, t in paced(ARGS.duration_s, P["steps_per_s"]):
        phase(f"step {step}")
        with torch.no_grad():
            kept.append(lin(torch.randn(rows, 1024, device=dev)))
        STATE["steps"] = step + 1
        if int(t) != last_print:
            last_print = int(t)
            log(f"t={t:5.1f}s step {step}: {mem_line()}")
        if ARGS.history and P["first_snapshot_s"] and not first_done and t >= P["first_snapshot_s"]:
            first_done = True
            save_snapshot(f"t{int(P['first_snapshot_s'])}s")
    torch.cuda.synchronize()
    if ARGS.history:
        save_snapshot()


def job_live_warmup():
    """Ramps to `target_bytes` over `warmup_s`, then trains at a steady level."""
    lin = nn.Linear(4096, 4096, device=dev)
    opt = torch.optim.AdamW(lin.parameters())
    pool = []
    ramp_chunks = 24
    chunk = P["target_bytes"] // ramp_chunks
    work_rows = max(64, min(16384, P["target_bytes"] // 64 // (4096 * 4)))
    for step, t in paced(ARGS.duration_s, 4):
        phase(f"step {step}")
        if t < P["warmup_s"] and len(pool) < ramp_chunks:
            want = min(ramp_chunks, int((t / max(P["warmup_s"], 1e-3)) * ramp_chunks) + 1)
            while len(pool) < want:
                pool.append(empty(chunk))
        x = torch.randn(work_rows, 4096, device=dev)
        loss = lin(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
        STATE["steps"] = step + 1
        if step % 4 == 0:
            log(f"t={t:5.1f}s step {step}: pool {len(pool)}/{ramp_chunks}, {mem_line()}")
    torch.cuda.synchronize()
    save_snapshot()


def job_live_steady():
    """Holds `steady_bytes` (or all but `leave_free_bytes`) and trains steadily."""
    lin = nn.Linear(2048, 2048, device=dev)
    work_rows = 8192
    if P.get("steady_bytes"):
        hold = P["steady_bytes"]
    else:
        hold = max(0, avail_bytes() - P["leave_free_bytes"] - 512 * MiB)
    held = empty(align(hold))
    held.fill_(1)
    log(f"holding {held.numel() / GiB:.2f} GiB")
    for step, t in paced(ARGS.duration_s, 4):
        phase(f"step {step}")
        x = torch.randn(work_rows, 2048, device=dev)
        loss = lin(x).square().mean()
        loss.backward()
        sgd_step(lin.parameters())
        del x, loss
        STATE["steps"] = step + 1
        if step % 4 == 0:
            log(f"t={t:5.1f}s step {step}: {mem_line()}")
    torch.cuda.synchronize()
    del held


JOBS = {name[4:]: fn for name, fn in globals().items() if name.startswith("job_")}


def write_result(outcome, error):
    stats = torch.cuda.memory_stats(dev)
    result = {
        "job": ARGS.job, "outcome": outcome, "error": error,
        "oom": OOM or None, "phase": STATE["phase"], "steps_completed": STATE["steps"],
        "resolved": RESOLVED, "snapshots": STATE["snapshots"],
        "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0),
        "peak_reserved_bytes": stats.get("reserved_bytes.all.peak", 0),
        "allocated_bytes": stats.get("allocated_bytes.all.current", 0),
        "reserved_bytes": stats.get("reserved_bytes.all.current", 0),
        "num_ooms": stats.get("num_ooms", 0), "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "cap_bytes": ARGS.cap_bytes, "card_bytes": ARGS.card_bytes,
        "memory_fraction": (min(1.0, LIMIT / TOTAL) if LIMIT else None),
        "batch_scale": ARGS.batch_scale, "seq_scale": ARGS.seq_scale, "fix": ARGS.fix,
        "device": {"name": PROPS.name, "total_bytes": int(TOTAL),
                   "free_at_start_bytes": int(FREE_AT_START),
                   "torch": torch.__version__, "cuda": torch.version.cuda},
        "pid": os.getpid(), "import_s": round(IMPORT_S, 3), "init_s": round(INIT_S, 3),
        "run_s": round(time.time() - T_GO, 3),
    }
    tmp = ARGS.result + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, ARGS.result)


def main():
    if ARGS.job not in JOBS:
        print(f"unknown job {ARGS.job!r}; jobs: {', '.join(sorted(JOBS))}", flush=True)
        return 2
    log(f"job {ARGS.job} pid {os.getpid()} on {PROPS.name} ({TOTAL / GiB:.2f} GiB, "
        f"{FREE_AT_START / GiB:.2f} GiB free), torch {torch.__version__}, "
        f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}, "
        f"limit {LIMIT}, batch x{ARGS.batch_scale:g}, seq x{ARGS.seq_scale:g}, fix={ARGS.fix}")
    outcome, error, rc = "completed", None, 0
    try:
        JOBS[ARGS.job]()
    except torch.OutOfMemoryError as e:
        traceback.print_exc()
        outcome, error, rc = "oom", str(e).splitlines()[0][:4000], 1
    except Exception as e:  # a broken job is reported as such, never as an OOM or a success
        traceback.print_exc()
        outcome, error, rc = "error", f"{type(e).__name__}: {e}"[:4000], 2
    if ARGS.snapshot_dir and not any(s["tag"] is None for s in STATE["snapshots"]):
        # An OOM case whose OOM never came (or a job without its own end snapshot): keep a
        # snapshot of the end anyway, so the case can be looked at.
        try:
            save_snapshot()
        except Exception as e:
            print(f"[case2] could not write the end snapshot: {e}", flush=True)
    write_result(outcome, error)
    log(f"outcome {outcome}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
