"""Deep Q-learning on a batch of environments simulated on the GPU (as GPU simulators and
EnvPool-style vectorised Atari run): 512 environments step together, each giving a stack of four
84x84 uint8 frames, and every step's transitions (observation, action, reward, next observation,
done) are appended to a replay buffer kept on the GPU, from which training batches are sampled.
The buffer has no size limit, so it grows by one frame stack per environment every step until
the card is full. `--buffer-limit N` keeps the latest N transitions (a ring of step chunks), as a
replay buffer's capacity does; `--buffer-device cpu` keeps the buffer in host memory and copies
each sampled batch over.

    python3 replay_buffer_gpu.py --cap-gib G [--buffer-limit 0] [--buffer-device gpu|cpu]
                                 [--batch-size 256] [--num-envs 512] [--steps 300]
"""

import argparse
import collections
import json
import random
import time

import torch
import torch.nn.functional as F
from gpu_size import limit_memory

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=0.0)
parser.add_argument("--buffer-limit", type=int, default=0, help="transitions kept (0: no limit)")
parser.add_argument("--buffer-device", default="gpu", choices=["gpu", "cpu"])
parser.add_argument("--batch-size", type=int, default=256, help="transitions per training batch")
parser.add_argument("--num-envs", type=int, default=512)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()
started = time.time()
limit_memory(args.cap_gib)

torch.manual_seed(0)
rng = random.Random(0)
actions_n, gamma = 18, 0.99


class QNetwork(torch.nn.Module):
    """The Nature DQN network."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(),
                                        torch.nn.Conv2d(32, 64, 4, stride=2), torch.nn.ReLU(),
                                        torch.nn.Conv2d(64, 64, 3, stride=1), torch.nn.ReLU(), torch.nn.Flatten())
        self.head = torch.nn.Sequential(torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, actions_n))

    def forward(self, frames):
        return self.head(self.conv(frames.float() / 255.0))


class VectorEnv:
    """A stand-in for a batch of Atari games on the GPU: new frames, rewards and episode ends."""

    def __init__(self, n):
        self.n = n
        self.frames = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, device="cuda")

    def step(self, actions):
        new_frame = torch.randint(0, 256, (self.n, 1, 84, 84), dtype=torch.uint8, device="cuda")
        self.frames = torch.cat([self.frames[:, 1:], new_frame], dim=1)
        reward = (actions % 3 == 0).float() * torch.rand(self.n, device="cuda")
        done = torch.rand(self.n, device="cuda") < 0.01
        return self.frames, reward, done


class ReplayBuffer:
    """Transitions stored as one chunk per environment step."""

    def __init__(self, limit, device):
        self.chunks = collections.deque(maxlen=max(1, limit // args.num_envs) if limit else None)
        self.device = device

    def add(self, *transition):
        if self.device == "cpu":
            transition = tuple(t.cpu() for t in transition)
        self.chunks.append(transition)

    def __len__(self):
        return len(self.chunks) * args.num_envs

    def sample(self, batch):
        per_chunk = 32
        picked = [rng.randrange(len(self.chunks)) for _ in range(batch // per_chunk)]
        parts = []
        for i in picked:
            rows = torch.randint(0, args.num_envs, (per_chunk,))
            parts.append([t[rows.to(t.device)] for t in self.chunks[i]])
        return [torch.cat(column).cuda(non_blocking=True) for column in zip(*parts)]


env = VectorEnv(args.num_envs)
online, target = QNetwork().cuda(), QNetwork().cuda()
target.load_state_dict(online.state_dict())
optimizer = torch.optim.Adam(online.parameters(), lr=1e-4, eps=1.5e-4)
buffer = ReplayBuffer(args.buffer_limit, "cpu" if args.buffer_device == "cpu" else "cuda")
obs = env.frames
loss = torch.zeros((), device="cuda")
for step in range(args.steps):
    epsilon = max(0.05, 1.0 - step / 200)
    with torch.no_grad():
        greedy = online(obs).argmax(dim=1)
    explore = torch.rand(args.num_envs, device="cuda") < epsilon
    actions = torch.where(explore, torch.randint(0, actions_n, (args.num_envs,), device="cuda"), greedy)
    next_obs, reward, done = env.step(actions)
    buffer.add(obs, actions, reward, next_obs, done)
    obs = next_obs
    if len(buffer) >= args.batch_size:
        s, a, r, s2, d = buffer.sample(args.batch_size)
        with torch.no_grad():
            best = online(s2).argmax(dim=1, keepdim=True)  # double DQN
            y = r + gamma * (~d).float() * target(s2).gather(1, best).squeeze(1)
        q = online(s).gather(1, a[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if step % 100 == 99:
        target.load_state_dict(online.state_dict())
    if step % 25 == 0:
        print(f"step {step} transitions stored {len(buffer)} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
print(json.dumps({"done": True, "steps": args.steps, "seconds": round(time.time() - started, 2),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                  "peak_reserved_bytes": torch.cuda.max_memory_reserved()}), flush=True)
