"""Records real CUDA caching-allocator snapshots with torch.cuda.memory_stats() taken at the same
moment, for vramscope's tests. Usage: python3 make_snapshots.py SCENARIO OUTDIR"""
import json, os, pickle, sys, time
import torch

name, out = sys.argv[1], sys.argv[2]
dev = torch.device("cuda:0")
MiB = 1 << 20


def base_truth():
    return dict(scenario=name, torch=torch.__version__, cuda=torch.version.cuda,
                alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), device=0)


def save(snap, stats, stem=None, protocols=(4,), json_copy=False, extra=None):
    stem = stem or name
    for p in protocols:
        suffix = "" if p == protocols[0] else f".p{p}"
        with open(f"{out}/{stem}{suffix}.pickle", "wb") as f:
            pickle.dump(snap, f, protocol=p)
    if json_copy:
        with open(f"{out}/{stem}.snapshot.json", "w") as f:
            json.dump(snap, f)
    truth = base_truth()
    truth.update(memory_stats=stats, mem_get_info=list(torch.cuda.mem_get_info(0)))
    truth.update(extra or {})
    with open(f"{out}/{stem}.truth.json", "w") as f:
        json.dump(truth, f, indent=1)


def snap_now():
    s = torch.cuda.memory._snapshot()
    return s, torch.cuda.memory_stats(0)


def busy(stream, n=60):
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    with torch.cuda.stream(stream):
        for _ in range(n):
            a = a @ a
            a = a / a.norm()
    return a


if name == "streams":
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=4000)
    keep = [torch.empty(n, device=dev) for n in (100, 1000, 50_000, 300_000, 2_000_000, 9_000_000)]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = [torch.empty(n, device=dev) for n in (200, 40_000, 3_000_000, 12_000_000)]
    del on_side[1]
    shared = [torch.empty(n, device=dev) for n in (500, 5_000_000, 700_000)]
    busy_out = busy(side)
    for t in shared:
        with torch.cuda.stream(side):
            t.mul_(2)
        t.record_stream(side)
    del shared, t
    tmp = [torch.empty(n, device=dev) for n in (3000, 8_000_000)]
    del tmp[0]
    s, stats = snap_now()
    save(s, stats, protocols=(4, 2, 5))
    torch.cuda.synchronize()

elif name == "expandable":
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=5000)
    ts = [torch.empty(n * MiB // 4, device=dev) for n in (30, 7, 64, 3, 120, 1, 45)]
    small = [torch.empty(k * 1000, device=dev) for k in range(1, 40)]
    del ts[1], ts[3], small[::3]
    torch.cuda.empty_cache()
    more = [torch.empty(n * MiB // 4, device=dev) for n in (90, 22, 5)]
    del more[0]
    s, stats = snap_now()
    save(s, stats)

elif name == "oom":
    torch.cuda.set_per_process_memory_fraction(3 * 1024**3 / torch.cuda.get_device_properties(0).total_memory)
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=3000)
    captured = {}

    def observer(device, alloc, device_alloc, device_free):
        if "snap" not in captured:
            captured["snap"] = torch.cuda.memory._snapshot()
            captured["stats"] = torch.cuda.memory_stats(0)

    torch._C._cuda_attach_out_of_memory_observer(observer)
    blocks = [torch.empty(40 * MiB // 4, device=dev) for _ in range(60)]
    del blocks[::2]
    small = [torch.empty(100_000, device=dev) for _ in range(30)]
    message = ""
    try:
        big = [torch.empty(70 * MiB // 4, device=dev) for _ in range(100)]
    except torch.OutOfMemoryError as e:
        message = str(e)
    with open(f"{out}/oom.oom.txt", "w") as f:
        f.write(message + "\n")
    save(captured["snap"], captured["stats"], extra=dict(oom_message=message, at="oom observer"))
    # And after the exception, with the failed request's memory released.
    s, stats = snap_now()
    save(s, stats, stem="oom_after", extra=dict(oom_message=message))

elif name == "leak":
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=600)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    leaked = []
    for step in range(40):
        x = torch.randn(256, 512, device=dev)
        y = model(x)
        loss = y.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        leaked.append(y.detach())  # the leak: one activation kept per step
    s, stats = snap_now()
    save(s, stats, json_copy=True)

elif name == "maxsplit":
    torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
    ts = [torch.empty(n * MiB // 4, device=dev) for n in (150, 30, 220, 8, 101, 99, 400)]
    del ts[2], ts[4]
    part = [torch.empty(n * MiB // 4, device=dev) for n in (60, 120, 12)]
    small = [torch.empty(k * 5000, device=dev) for k in range(1, 20)]
    del small[1::2]
    s, stats = snap_now()
    save(s, stats)

elif name == "graphs":
    torch.cuda.memory._record_memory_history(context=None, max_entries=3000)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    static_in = torch.randn(64, 1024, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_in)
    g.replay()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        in_pool = [torch.empty(n, device=dev) for n in (1000, 4_000_000, 30_000_000)]
    del in_pool[0]
    torch.cuda.synchronize()
    s, stats = snap_now()
    save(s, stats)

elif name == "nohistory":
    ts = [torch.empty(n, device=dev) for n in (10, 300_000, 6_000_000, 25_000_000)]
    del ts[1]
    s, stats = snap_now()
    save(s, stats)
    bare = torch.cuda.memory_snapshot()
    stats = torch.cuda.memory_stats(0)
    save(bare, stats, stem="nohistory_bare")

elif name == "cpp":
    from torch.utils.cpp_extension import load_inline
    src = r'''
#include <torch/extension.h>
#include <torch/csrc/cuda/memory_snapshot.h>
pybind11::bytes snap() { return pybind11::bytes(torch::cuda::_memory_snapshot_pickled()); }
'''
    t0 = time.time()
    ext = load_inline("vs_snap", cpp_sources=src, functions=["snap"], with_cuda=True,
                      extra_cflags=["-O0"], verbose=False, build_directory=out + "/../build_cpp")
    print("compiled in", time.time() - t0, flush=True)
    torch.cuda.memory._record_memory_history(context="all", stacks="python", max_entries=1500)
    ts = [torch.empty(n, device=dev) for n in (10, 300_000, 6_000_000, 25_000_000, 700)]
    del ts[1], ts[3]
    data = ext.snap()
    stats = torch.cuda.memory_stats(0)
    with open(f"{out}/cpp.pickle", "wb") as f:
        f.write(data)
    truth = base_truth()
    truth.update(memory_stats=stats, at="torch::cuda::_memory_snapshot_pickled")
    with open(f"{out}/cpp.truth.json", "w") as f:
        json.dump(truth, f, indent=1)

print(name, "done", flush=True)
