# A training job with the two-line vramscope live-capture helper, as the README tells users.
import sys, time, torch
sys.path.insert(0, "assets/python")
import vramscope_capture
vramscope_capture.start("/tmp/live/snapshots/", every_s=2)

dev = torch.device("cuda:0")
model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
keep = []
for step in range(60):
    x = torch.randn(4096, 8192, device=dev)
    out = model(x)
    loss = out.square().mean(); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    keep.append(out.detach().clone())  # a leak: one 128 MiB tensor per step
    print(f"step {step} allocated {torch.cuda.memory_allocated()/2**30:.2f} GiB", flush=True)
    time.sleep(0.1)
# then an allocation that cannot fit: the OOM observer writes one more snapshot
torch.empty(200 * 2**30, dtype=torch.uint8, device=dev)
