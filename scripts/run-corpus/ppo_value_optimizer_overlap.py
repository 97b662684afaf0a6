"""RLHF-style PPO fine-tuning of a 354M-parameter GPT policy with a value head on its backbone,
with two optimizers that both hold the whole backbone.

Scenario: PPO for a language model in the style of TRL's AutoModelForCausalLMWithValueHead: the
policy's last hidden states also feed a scalar value head; a frozen bfloat16 copy of the initial
policy gives the reference log-probabilities for the KL penalty. Responses are scored (here with
synthetic rewards), advantages come from GAE, and each PPO iteration runs two epochs over
mini-batches with the clipped policy and value losses.

Mistake: the script keeps separate optimizers "for the policy and for the value head", but builds
the second as `AdamW(model.parameters())` over the whole policy-with-value-head module instead of
`model.value_head.parameters()`. The backbone is then in both optimizers: each backbone weight is
updated twice per step and gets two sets of AdamW moments. The policy optimizer's first step
fits; the value optimizer's first step allocates a second 2.8 GB of moments and runs out of
memory inside `value_optimizer.step()`. `--value-optimizer-params head` gives the value optimizer
only the value head (what was meant).

Memory (policy fp32 under bfloat16 autocast, mini-batch 2 x 512 tokens):
  parameters: policy 354.0M x 4 B = 1.42 GB (P); reference copy in bf16 0.71 GB.
  gradients P = 1.42 GB; policy AdamW moments 2P = 2.83 GB; foreach step temporaries ~P.
  activations ~1.5 GB in the backward (24 layers of 1,024 tokens, 0.2 GB of logits) - freed
  before the steps.
  cap_from (head): peak at the policy step, P + ref + P + 2P + P = 7.8 GB.
  own (all): the value step adds 2P more moments and its own P of temporaries: P + ref + P + 2P
  + 2P + P = 10.6 GB, 1.36 x the cap_from peak: fails inside value_optimizer.step() of the
  first PPO update.

    python3 ppo_value_optimizer_overlap.py --cap-gib G [--value-optimizer-params all|head]
        [--mini-batch 2] [--rollout-batch 8] [--seq-len 512] [--layers 24] [--width 1024] [--iterations 3]
"""

import argparse
import copy

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--value-optimizer-params", default="all", choices=["all", "head"],
                    help="what the value optimizer is given: the whole model, or the value head")
parser.add_argument("--mini-batch", type=int, default=2, help="sequences per PPO mini-batch")
parser.add_argument("--rollout-batch", type=int, default=8, help="sequences per PPO iteration")
parser.add_argument("--seq-len", type=int, default=512, help="prompt + response tokens")
parser.add_argument("--response-len", type=int, default=128)
parser.add_argument("--layers", type=int, default=24)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--vocab", type=int, default=50304)
parser.add_argument("--ppo-epochs", type=int, default=2)
parser.add_argument("--iterations", type=int, default=3)
args = parse_args(parser)

torch.manual_seed(0)
CLIP, VALUE_CLIP, KL_COEF, GAMMA, LAM = 0.2, 0.2, 0.05, 1.0, 0.95


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.heads = width // 64
        self.ln1 = torch.nn.LayerNorm(width)
        self.attn = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.ln2 = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, 4 * width)
        self.out = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(args.vocab, args.width)
        self.wpe = torch.nn.Embedding(args.seq_len, args.width)
        self.blocks = torch.nn.ModuleList([Block(args.width) for _ in range(args.layers)])
        self.ln_f = torch.nn.LayerNorm(args.width)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        hidden = self.ln_f(x)
        return hidden @ self.wte.weight.T, hidden  # tied output layer


class PolicyWithValueHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.policy = GPT()
        self.value_head = torch.nn.Linear(args.width, 1)

    def forward(self, ids):
        logits, hidden = self.policy(ids)
        return logits, self.value_head(hidden).squeeze(-1)


def token_logprobs(logits, ids):
    """Log-probability of each next token (positions 1..T-1)."""
    return torch.gather(logits[:, :-1].float().log_softmax(dim=-1), 2, ids[:, 1:, None]).squeeze(-1)


model = PolicyWithValueHead().to(DEVICE)
reference = copy.deepcopy(model.policy).to(torch.bfloat16).requires_grad_(False).eval()
policy_optimizer = torch.optim.AdamW(model.policy.parameters(), lr=1e-6, weight_decay=0.0)
value_params = model.parameters() if args.value_optimizer_params == "all" else model.value_head.parameters()
value_optimizer = torch.optim.AdamW(value_params, lr=1e-5, weight_decay=0.0)
print(f"policy {sum(p.numel() for p in model.policy.parameters()) / 1e6:.1f}M parameters; value optimizer "
      f"holds {sum(p.numel() for g in value_optimizer.param_groups for p in g['params']) / 1e6:.1f}M", flush=True)
autocast = torch.autocast(DEVICE.type, dtype=torch.bfloat16)
prompt_len = args.seq_len - args.response_len
for iteration in range(args.iterations):
    # Rollouts: prompts and the responses a generation server sampled for them.
    ids = torch.randint(0, args.vocab, (args.rollout_batch, args.seq_len), device=DEVICE)
    with torch.no_grad(), autocast:
        old_logprobs, old_values, ref_logprobs = [], [], []
        for start in range(0, args.rollout_batch, args.mini_batch):
            chunk = ids[start:start + args.mini_batch]
            logits, values = model(chunk)
            old_logprobs.append(token_logprobs(logits, chunk))
            old_values.append(values[:, :-1].float())
            ref_logprobs.append(token_logprobs(reference(chunk)[0], chunk))
        old_logprobs, old_values, ref_logprobs = map(torch.cat, (old_logprobs, old_values, ref_logprobs))
    # Rewards: a sequence-level score at the last token, minus the per-token KL penalty.
    response = torch.zeros_like(old_logprobs)
    response[:, prompt_len - 1:] = 1.0
    rewards = -KL_COEF * (old_logprobs - ref_logprobs) * response
    rewards[:, -1] += torch.randn(args.rollout_batch, device=DEVICE)
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(args.rollout_batch, device=DEVICE)
    for t in range(rewards.shape[1] - 1, prompt_len - 2, -1):  # GAE over the response tokens
        next_value = old_values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros_like(last)
        delta = rewards[:, t] + GAMMA * next_value - old_values[:, t]
        last = delta + GAMMA * LAM * last
        advantages[:, t] = last
    returns = advantages + old_values
    advantages = (advantages - advantages[response.bool()].mean()) / (advantages[response.bool()].std() + 1e-8)

    for epoch in range(args.ppo_epochs):
        for start in range(0, args.rollout_batch, args.mini_batch):
            rows = slice(start, start + args.mini_batch)
            mask = response[rows]
            with autocast:
                logits, values = model(ids[rows])
            logprobs = token_logprobs(logits, ids[rows])
            ratio = (logprobs - old_logprobs[rows]).exp()
            surrogate = torch.min(ratio * advantages[rows],
                                  ratio.clamp(1 - CLIP, 1 + CLIP) * advantages[rows])
            policy_loss = -(surrogate * mask).sum() / mask.sum()
            values = values[:, :-1].float()
            clipped = old_values[rows] + (values - old_values[rows]).clamp(-VALUE_CLIP, VALUE_CLIP)
            value_loss = 0.5 * (torch.max((values - returns[rows]) ** 2, (clipped - returns[rows]) ** 2)
                                * mask).sum() / mask.sum()
            (policy_loss + 0.1 * value_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            policy_optimizer.step()
            value_optimizer.step()
            policy_optimizer.zero_grad(set_to_none=True)
            value_optimizer.zero_grad(set_to_none=True)
        print(f"iteration {iteration} epoch {epoch}: policy loss {policy_loss.item():.4f} "
              f"value loss {value_loss.item():.4f}", flush=True)
finish(args.iterations)
