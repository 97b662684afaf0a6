"""The case registry of the second real-case corpus (issue 10): what each case is, how it is
built, what it should be diagnosed as, and which candidate fixes are re-run for it.

No torch here: the orchestrators import this module, the jobs (jobs.py) run in their own
processes. Sizes are in bytes unless a name says otherwise.

A case's job is a real PyTorch program in jobs.py with real knobs:
  * PYTORCH_CUDA_ALLOC_CONF, set in the environment before Python starts;
  * --cap-bytes: torch.cuda.set_per_process_memory_fraction(cap / total) before any allocation;
  * --batch-scale / --seq-scale: every batch-proportional (or sequence-proportional) size;
  * --fix: the code change that removes a built-in bug (keep .item() instead of the tensor, ...);
  * the "other process" (a second process holding memory), started or not.
So a recommendation made later (an allocator setting, a cap, a batch factor, freeing the other
process, fixing the leak) maps onto a candidate that was really run.
"""

GiB = 1 << 30
MiB = 1 << 20

# Primary categories use the diagnosis engine's kebab-case vocabulary (src/diagnose/finding.rs).
CAPACITY = "capacity"
FRAGMENTATION = "fragmentation"
MEMORY_CAP = "memory-cap"
OTHER_PROCESS = "other-process"
LEAK = "leak"
HEALTHY = "healthy"

# Which candidate groups a case gets re-run under (see candidates()).
#   conf_expandable  expandable_segments:True
#   conf_split       max_split_size_mb around the failing request ("p" = largest power of two MiB
#                    not above it; "around" = p/2, p, 2p, 4p)
#   conf_gc          garbage_collection_threshold:0.6 (only acts under a per-process cap)
#   conf_roundup     roundup_power2_divisions:4
#   caps             cap x1.5, x2, x4, x8 and no cap
#   scale_batch      batch x0.75, x0.5, x0.25
#   scale_seq        sequence (or generated tokens) x0.75, x0.5, x0.25
#   other_gone       the other process is not started
#   fix              the case's code fix (fix_kind names it)

CASES = {
    # ---------------------------------------------------------------- capacity
    "capacity_first_step": {
        "kind": "oom",
        "job": "transformer_train",
        "whole_card": True,
        "history": 2500,
        "params": {"layers": 12, "d_model": 4096, "heads": 32, "batch": 64, "seq": 1024,
                   "long_seq": 0, "warm_steps": 0, "steps": 2, "dtype": "float32"},
        "smoke_params": {"layers": 2, "d_model": 256, "heads": 4, "batch": 128, "seq": 256},
        "expected": CAPACITY,
        "construction": "model",
        "description": "A 12-layer, d=4096 fp32 transformer (TF32 matmuls, SGD) trained on 64 x 1024 "
                       "tokens: the activations of the first forward pass alone (about 17 GiB per "
                       "layer) exceed the card, so the first training step never completes.",
        "groups": ["conf_expandable", "conf_split:p", "conf_roundup", "scale_batch"],
        "timeout_s": 45,
    },
    "capacity_backward": {
        "kind": "oom",
        "job": "mlp_capacity_backward",
        "whole_card": True,
        "history": 2000,
        "params": {"layers": 8, "d_model": 2048, "rows": 0, "rows_fraction_of_free": 1 / 10.5,
                   "steps": 2},
        "smoke_params": {"layers": 4, "d_model": 256},
        "expected": CAPACITY,
        "construction": "model",
        "description": "An 8-layer ReLU MLP (fp32, TF32) whose batch was sized so that the forward "
                       "pass fits (about 10 activations of 1/10.5 of the free memory each) but the "
                       "backward pass of the first step needs one more: the first step fails in "
                       "backward.",
        "groups": ["conf_expandable", "conf_split:p", "scale_batch"],
        "timeout_s": 40,
    },
    "capacity_long_batch": {
        "kind": "oom",
        "job": "transformer_train",
        "whole_card": True,
        "history": 2500,
        "params": {"layers": 8, "d_model": 2048, "heads": 16, "batch": 16, "seq": 1024,
                   "long_seq": 24576, "warm_steps": 4, "steps": 1, "dtype": "bfloat16"},
        "smoke_params": {"layers": 2, "d_model": 256, "heads": 4, "batch": 16, "seq": 64,
                         "long_seq": 4096},
        "expected": CAPACITY,
        "construction": "model",
        "description": "An 8-layer, d=2048 bf16 transformer trains four steps on 16 x 1024 tokens, "
                       "then meets a batch of 16 x 24576 tokens (a long-document outlier): the "
                       "activations of that batch exceed the card. Steps completed before the "
                       "failure; the job needs more than the card for its longest batch.",
        "groups": ["conf_expandable", "conf_split:p", "scale_batch", "scale_seq"],
        "timeout_s": 45,
    },
    "capacity_no_grad": {
        "kind": "oom",
        "job": "mlp_no_grad",
        "whole_card": True,
        "history": 0,
        "params": {"layers": 16, "d_model": 2048, "rows": 0, "rows_fraction_of_free": 1 / 12.0},
        "smoke_params": {"layers": 6, "d_model": 256},
        "expected": CAPACITY,
        "construction": "model",
        "fix_kind": "no-grad-inference",
        "description": "Batch inference with a 16-layer bf16 MLP that forgot torch.no_grad(): every "
                       "layer's activation is kept for a backward pass that never comes, and the "
                       "forward pass runs out of memory at about layer 11. No history recorded.",
        "groups": ["conf_expandable", "fix", "scale_batch"],
        "timeout_s": 40,
    },
    # ----------------------------------------------------------- fragmentation
    "frag_fill_card": {
        "kind": "oom",
        "job": "frag_halves",
        "whole_card": True,
        "history": 2500,
        "params": {"segment_bytes": 2 * GiB, "request_fraction": 0.75, "count": 0,
                   "pad_bytes": 0, "leave_free_bytes": 64 * MiB, "count_slack_bytes": 256 * MiB},
        "smoke_params": {"segment_bytes": 64 * MiB, "leave_free_bytes": 4 * MiB,
                         "count_slack_bytes": 16 * MiB},
        "expected": FRAGMENTATION,
        "construction": "allocation pattern",
        "description": "An earlier phase fills the card with 2 GiB buffers and frees them (cached); "
                       "the next phase allocates 1 GiB buffers that split every cached segment and "
                       "keeps every second one. Half of the card is cached but free, in 1 GiB "
                       "holes; a 1.5 GiB request fails.",
        "groups": ["conf_expandable", "conf_split:around", "conf_roundup", "scale_batch"],
        "timeout_s": 30,
    },
    "frag_small_holes": {
        "kind": "oom",
        "job": "frag_small",
        "whole_card": True,
        "history": 0,
        "params": {"big_bytes": 4 * GiB, "small_bytes": 18 * MiB, "request_bytes": 2 * GiB,
                   "big_count": 0, "tail_bytes": 0, "small_count": 0, "big_slack_bytes": GiB,
                   "tail_slack_bytes": 256 * MiB, "small_slack_bytes": 128 * MiB},
        "smoke_params": {"big_bytes": 128 * MiB, "small_bytes": 2 * MiB, "request_bytes": 64 * MiB,
                         "big_slack_bytes": 32 * MiB, "tail_slack_bytes": 8 * MiB,
                         "small_slack_bytes": 4 * MiB},
        "expected": FRAGMENTATION,
        "construction": "allocation pattern",
        "description": "Large buffers fill the card and are freed (cached); then about 7,900 18 MiB "
                       "buffers split them and every second one is kept. Half of the card is free "
                       "in 18 MiB holes, smaller than the 20 MiB pages of expandable segments, so "
                       "expandable segments cannot return them; max_split_size_mb keeps the small "
                       "buffers out of the large cached blocks. A 2 GiB request fails. No history "
                       "recorded (the snapshot has ~8,000 blocks).",
        "groups": ["conf_expandable", "conf_split:around", "conf_roundup", "scale_batch"],
        "timeout_s": 40,
    },
    "two_streams": {
        "kind": "oom",
        "job": "two_streams",
        "whole_card": True,
        "history": 2500,
        # The activation is larger than what is left free on the device (leave_free_bytes, kept
        # so that CUDA can still load modules): the first run (activation 512 MiB = what was
        # left free) completed instead of failing, see docs/gpu-verification/cases2-run/.
        "params": {"staging_bytes": 2 * GiB, "batch_bytes": 1 * GiB, "activation_bytes": 1 * GiB,
                   "count": 0, "pad_bytes": 0, "leave_free_bytes": 512 * MiB,
                   "count_slack_bytes": 256 * MiB},
        "smoke_params": {"staging_bytes": 64 * MiB, "batch_bytes": 32 * MiB,
                         "activation_bytes": 16 * MiB, "leave_free_bytes": 4 * MiB,
                         "count_slack_bytes": 16 * MiB},
        "expected": FRAGMENTATION,
        "construction": "allocation pattern",
        "fix_kind": "same-stream",
        "description": "A prefetcher on a side stream stages data in 2 GiB buffers filling the card, "
                       "frees them, then allocates 1 GiB batches (on the side stream, handed to the "
                       "main stream with record_stream) and keeps every second one. The main "
                       "stream's 1 GiB request fails (512 MiB are left free on the device) "
                       "although the side stream's pool holds half the card in free 1 GiB blocks: "
                       "cached blocks belong to the stream that allocated them.",
        "groups": ["conf_expandable", "conf_split:around", "fix", "scale_batch"],
        "timeout_s": 30,
    },
    "cap_fragmentation": {
        "kind": "oom",
        "job": "frag_halves",
        "whole_card": False,
        "cap_bytes": 24 * GiB,
        "history": 2500,
        "params": {"segment_bytes": 1 * GiB, "request_fraction": 0.75, "count": 0,
                   "pad_bytes": 0, "leave_free_bytes": 64 * MiB, "count_slack_bytes": 256 * MiB},
        "smoke_params": {"segment_bytes": 16 * MiB, "leave_free_bytes": 2 * MiB,
                         "count_slack_bytes": 8 * MiB},
        "smoke_cap_bytes": 400 * MiB,
        "need_bytes": 26 * GiB,
        "expected": FRAGMENTATION,
        "construction": "allocation pattern",
        "description": "Under a 24 GiB per-process cap, 1 GiB buffers fill the cap and are freed; "
                       "512 MiB buffers split them and every second one is kept. A 768 MiB request "
                       "fails with about 11.5 GiB of the cap cached but free in 512 MiB holes.",
        "groups": ["conf_expandable", "conf_split:around", "conf_gc", "conf_roundup", "caps",
                   "scale_batch"],
        "timeout_s": 30,
    },
    # ------------------------------------------------------------------- cap
    "cap_static": {
        "kind": "oom",
        "job": "mlp_train",
        "whole_card": False,
        "cap_bytes": 4 * GiB,
        "history": 0,
        "params": {"layers": 4, "d_model": 4096, "rows": 77824, "steps": 3},
        "smoke_params": {"layers": 2, "d_model": 256, "rows": 4096},
        "smoke_cap_bytes": 10 * MiB,
        "need_bytes": 14 * GiB,
        "expected": MEMORY_CAP,
        "construction": "model",
        "description": "A 4-layer d=4096 fp32 MLP trained on 77824 rows under "
                       "set_per_process_memory_fraction for 4 GiB: the job needs about 10 GiB, the "
                       "first step fails. No history recorded.",
        "groups": ["conf_expandable", "conf_split:p", "conf_gc", "conf_roundup", "caps",
                   "scale_batch"],
        "timeout_s": 30,
    },
    "cap_growth": {
        "kind": "oom",
        "job": "growth",
        "whole_card": False,
        "cap_bytes": 4 * GiB,
        "base_conf": {"expandable_segments": "True"},
        "history": 3000,
        "params": {"step_bytes": 36 * MiB, "steps": 800, "work_bytes": 64 * MiB},
        "smoke_params": {"step_bytes": 2 * MiB, "steps": 100, "work_bytes": 4 * MiB},
        "smoke_cap_bytes": 64 * MiB,
        "need_bytes": 30 * GiB,
        "expected": MEMORY_CAP,
        "construction": "allocation pattern",
        "fix_kind": "fix-leak",
        "description": "An evaluation loop under a 4 GiB cap with expandable segments on keeps every "
                       "step's 36 MiB output on the GPU for a metric computed at the end: the live "
                       "set grows to 28 GiB over 800 steps. It fails at about step 110; only a cap "
                       "above 28 GiB (or keeping a summary instead) lets it finish.",
        "groups": ["conf_split:around", "conf_gc", "conf_roundup", "caps", "scale_batch", "fix"],
        "timeout_s": 30,
    },
    # --------------------------------------------------------- other process
    "other_process_big": {
        "kind": "oom",
        "job": "mlp_train",
        "whole_card": True,
        "hog_leave_free_bytes": 16 * GiB,
        "history": 2500,
        "params": {"layers": 4, "d_model": 4096, "rows": 180224, "steps": 3},
        "smoke_params": {"layers": 2, "d_model": 256, "rows": 4096},
        "smoke_card_bytes": 16 * MiB,
        "expected": OTHER_PROCESS,
        "construction": "model",
        "description": "Another process holds all but 16 GiB of the card; a 4-layer d=4096 fp32 MLP "
                       "training job that needs about 22 GiB fails in its first step.",
        "groups": ["other_gone", "conf_expandable", "scale_batch"],
        "timeout_s": 30,
    },
    "other_process_small": {
        "kind": "oom",
        "job": "mlp_train",
        "whole_card": True,
        "hog_bytes_fraction": 0.40,
        "history": 0,
        "params": {"layers": 4, "d_model": 4096, "rows": 720896, "steps": 2},
        "smoke_params": {"layers": 2, "d_model": 256, "rows": 4096},
        "smoke_card_bytes": 16 * MiB,
        "expected": OTHER_PROCESS,
        "construction": "model",
        "description": "Another process holds 40 % of the card (about 56 GiB); a 4-layer d=4096 fp32 "
                       "MLP training job that needs about 88 GiB alone fails in its first step. "
                       "No history recorded.",
        "groups": ["other_gone", "conf_expandable", "scale_batch"],
        "timeout_s": 40,
    },
    # ------------------------------------------------------- growth and leaks
    "leak_oom": {
        "kind": "oom",
        "job": "leak_oom",
        "whole_card": True,
        "history": 2500,
        "params": {"d_model": 1024, "rows": 262144, "steps": 600},
        "smoke_params": {"d_model": 256, "rows": 4096},
        "expected": LEAK,
        "construction": "model",
        "fix_kind": "fix-leak",
        "description": "A training loop (d=1024 linear layer, 262144 rows) appends every step's 1 GiB "
                       "output (with its autograd graph) to a list: memory grows by about 1 GiB per "
                       "step until the card is full at about step 135 of 600.",
        "groups": ["fix", "conf_expandable", "scale_batch"],
        "timeout_s": 40,
    },
    "kv_cache": {
        "kind": "oom",
        "job": "kv_cache",
        "whole_card": True,
        "history": 2500,
        "params": {"layers": 16, "d_model": 1024, "heads": 8, "batch": 64, "chunk": 2048,
                   "max_tokens": 49152},
        "smoke_params": {"layers": 4, "d_model": 128, "heads": 2, "batch": 32, "chunk": 256,
                         "max_tokens": 16384},
        "expected": CAPACITY,
        "construction": "model",
        "description": "Decoding-style inference (bf16, 16 layers, batch 64) whose KV cache grows "
                       "with torch.cat by 2048 tokens per step towards 49152 tokens; at 4 MiB per "
                       "token the cache outgrows the card at about 33,000 tokens. Attention is "
                       "computed for the newest token only, to keep compute small.",
        "groups": ["conf_expandable", "conf_split:p", "scale_batch", "scale_seq"],
        "timeout_s": 40,
    },
    # ---------------------------------------------------------------- no OOM
    "healthy_train": {
        "kind": "no-oom",
        "job": "healthy",
        "whole_card": True,
        "history": 2500,
        "params": {"layers": 4, "d_model": 2048, "heads": 16, "batch": 8, "seq": 1024, "steps": 20},
        "smoke_params": {"layers": 2, "d_model": 128, "heads": 2, "batch": 4, "seq": 64,
                         "steps": 5},
        "expected": HEALTHY,
        "construction": "model",
        "description": "A bf16 transformer trained 20 steps with AdamW: memory flat after the first "
                       "step. Snapshot at the end, with history.",
        "groups": [],
        "timeout_s": 40,
    },
    "leak_no_oom": {
        "kind": "no-oom",
        "job": "leak_no_oom",
        "whole_card": True,
        "history": 2500,
        "params": {"layers": 4, "d_model": 4096, "rows": 16384, "batches": 30, "first_snapshot": 10},
        "smoke_params": {"layers": 2, "d_model": 128, "rows": 256, "batches": 12,
                         "first_snapshot": 4},
        "expected": LEAK,
        "construction": "model",
        "fix_kind": "fix-leak",
        "description": "A validation loop without torch.no_grad() sums `total_loss = total_loss + "
                       "loss`, which keeps every batch's autograd graph and its activations (512 "
                       "MiB per batch): 30 batches, no OOM. Snapshots after batch 10 and at the end.",
        "groups": [],
        "timeout_s": 40,
    },
}

# Live-recorded cases (run_live.py): `vramscope record --interval-ms 250` and nvidia-smi CSV logs
# beside one or two jobs, one case at a time.
LIVE_CASES = {
    "live_fast_leak": {
        "jobs": [{"job": "live_leak", "params": {"keep_bytes": 128 * MiB, "steps_per_s": 4,
                                                 "history": 2000, "first_snapshot_s": 20}}],
        "smoke_jobs": [{"job": "live_leak", "params": {"keep_bytes": 8 * MiB, "steps_per_s": 4,
                                                       "history": 500, "first_snapshot_s": 2}}],
        "expected": LEAK,
        "expected_severity": "critical",
        "description": "One training-like process keeps a 128 MiB output 4 times a second: +512 MiB/s "
                       "to about 30 GiB in 60 s, no OOM. Snapshots (with history) after 20 s and at "
                       "the end.",
    },
    "live_warmup_plateau": {
        "jobs": [{"job": "live_warmup", "params": {"warmup_s": 12, "target_bytes": 40 * GiB,
                                                   "history": 2000}}],
        "smoke_jobs": [{"job": "live_warmup", "params": {"warmup_s": 1, "target_bytes": 256 * MiB,
                                                         "history": 500}}],
        "expected": HEALTHY,
        "expected_severity": "info",
        "description": "A job that ramps to about 40 GiB over its first 12 s (buffers, optimizer "
                       "state, a growing cache pool), then trains at a steady level with periodic "
                       "allocate/free for the rest of the minute. Snapshot at the end, with history.",
    },
    "live_two_procs": {
        "jobs": [{"job": "live_steady", "params": {"steady_bytes": 20 * GiB}},
                 {"job": "live_leak", "params": {"keep_bytes": 64 * MiB, "steps_per_s": 4,
                                                 "history": 0, "first_snapshot_s": 0}}],
        "smoke_jobs": [{"job": "live_steady", "params": {"steady_bytes": 128 * MiB}},
                       {"job": "live_leak", "params": {"keep_bytes": 4 * MiB, "steps_per_s": 4,
                                                       "history": 0, "first_snapshot_s": 0}}],
        "expected": LEAK,
        "expected_severity": "critical",
        "description": "Two processes: one trains steadily at about 20 GiB, the other keeps a 64 MiB "
                       "output 4 times a second (+256 MiB/s, about 15 GiB in 60 s). The leaking "
                       "process's pid is in the truth file.",
    },
    "live_near_full": {
        "jobs": [{"job": "live_steady", "params": {"steady_bytes": 0,
                                                   "leave_free_bytes": 4 * GiB}}],
        "smoke_jobs": [{"job": "live_steady", "params": {"steady_bytes": 256 * MiB}}],
        "expected": CAPACITY,
        "expected_severity": "warning",
        "description": "One process holds all but about 4 GiB of the card (about 136 of 140 GiB "
                       "used) and trains steadily: not failing, but above 95 % of the card.",
    },
}

# How long each live job is active, seconds (issue 10: captures of at least 60 s).
LIVE_ACTIVE_S = 60.0
SMOKE_LIVE_ACTIVE_S = 4.0

# Smoke mode: every whole-card run is capped to this "virtual card" (or the case's
# smoke_card_bytes), every capped case uses its smoke_cap_bytes, the other process holds
# SMOKE_HOG_BYTES, so the whole corpus's code paths run in well under a minute.
SMOKE_CARD_BYTES = 768 * MiB
SMOKE_HOG_BYTES = 256 * MiB


def max_split_values(requested_bytes, mode):
    """max_split_size_mb values around a failing request: "p" is the largest power of two MiB not
    above the request; "around" adds p/2, 2p and 4p. PyTorch accepts only values above 20."""
    if not requested_bytes:
        return []
    mb = max(1, int(requested_bytes // MiB))
    p = 1 << (mb.bit_length() - 1)
    values = [p] if mode == "p" else [p // 2, p, 2 * p, 4 * p]
    return sorted({v for v in values if v > 20})


def merge_conf(base, extra):
    """PYTORCH_CUDA_ALLOC_CONF from two {key: value} dicts, extra winning: 'k:v,k:v'."""
    settings = dict(base or {})
    settings.update(extra or {})
    return ",".join(f"{k}:{v}" for k, v in settings.items())


def candidates(name, case, requested_bytes, smoke=False):
    """The candidate fixes to re-run a failed case under, in priority order (round "A" first: the
    fixes a diagnosis is most likely to recommend first; round "B" the rest). Each candidate is a
    dict: id, round, change (structured: what was changed, for the mapping in the Rust test),
    conf (the full PYTORCH_CUDA_ALLOC_CONF or ""), cap_bytes (None = no cap), batch_scale,
    seq_scale, fix, hog (other process started), group (scale groups are bisected when runs are
    exclusive)."""
    base_conf = case.get("base_conf", {})
    cap = case.get("smoke_cap_bytes" if smoke else "cap_bytes", case.get("cap_bytes"))
    has_hog = "hog_leave_free_bytes" in case or "hog_bytes_fraction" in case
    out = []

    def add(cid, rnd, change, conf_extra=None, cap_bytes=cap, batch=1.0, seq=1.0, fix=False,
            hog=has_hog, group=None):
        out.append({
            "id": cid, "round": rnd, "change": change,
            "conf": merge_conf(base_conf, conf_extra),
            "cap_bytes": cap_bytes, "batch_scale": batch, "seq_scale": seq, "fix": fix,
            "hog": hog, "group": group,
        })

    for group in case["groups"]:
        kind, _, arg = group.partition(":")
        if kind == "conf_expandable":
            add("expandable_segments", "A",
                {"kind": "alloc-conf", "settings": {"expandable_segments": "True"}},
                {"expandable_segments": "True"})
        elif kind == "conf_split":
            values = max_split_values(requested_bytes, arg)
            p = max_split_values(requested_bytes, "p")
            for v in values:
                add(f"max_split_size_mb_{v}", "A" if v in p else "B",
                    {"kind": "alloc-conf", "settings": {"max_split_size_mb": str(v)}},
                    {"max_split_size_mb": str(v)})
        elif kind == "conf_gc":
            if cap:
                add("garbage_collection_threshold_0.6", "B",
                    {"kind": "alloc-conf", "settings": {"garbage_collection_threshold": "0.6"}},
                    {"garbage_collection_threshold": "0.6"})
        elif kind == "conf_roundup":
            add("roundup_power2_divisions_4", "B",
                {"kind": "alloc-conf", "settings": {"roundup_power2_divisions": "4"}},
                {"roundup_power2_divisions": "4"})
        elif kind == "caps":
            for factor in (1.5, 2.0, 4.0, 8.0):
                add(f"cap_x{factor:g}", "A", {"kind": "cap", "factor": factor,
                                              "cap_bytes": int(cap * factor)},
                    cap_bytes=int(cap * factor))
            add("no_cap", "A", {"kind": "cap", "factor": None, "cap_bytes": None}, cap_bytes=None)
        elif kind in ("scale_batch", "scale_seq"):
            knob = "batch" if kind == "scale_batch" else "seq"
            for factor in (0.5, 0.75, 0.25):
                add(f"{knob}_x{factor:g}", "A" if factor == 0.5 else "B",
                    {"kind": "scale", "knob": knob, "factor": factor},
                    batch=factor if knob == "batch" else 1.0,
                    seq=factor if knob == "seq" else 1.0, group=kind)
        elif kind == "other_gone":
            add("other_process_gone", "A", {"kind": "other-process-gone"}, hog=False)
        elif kind == "fix":
            add(f"fix_{case['fix_kind']}", "A", {"kind": "code-fix", "fix": case["fix_kind"]},
                fix=True)
        else:
            raise ValueError(f"{name}: unknown candidate group {group!r}")
    out.sort(key=lambda c: c["round"])
    if smoke:
        # One re-run per case keeps the smoke run short; which one rotates with the case's place
        # in the registry, so that every kind of knob (allocator setting, cap, batch factor,
        # fix, other process gone) runs somewhere.
        round_a = [c for c in out if c["round"] == "A"] or out
        if round_a:
            out = [round_a[list(CASES).index(name) % len(round_a) if name in CASES else 0]]
    return out


def scale_plan(group_results, values=(0.5, 0.75, 0.25)):
    """Which factor of a scale group to run next, given {factor: outcome} so far, or None.

    Monotonic reasoning keeps exclusive (whole-card) runs few: a smaller batch never needs more
    memory, so 0.5 runs first; if it completes, 0.75 is tried and 0.25 is implied to complete; if
    it fails, 0.25 is tried and 0.75 is implied to fail. Returns (factor, None) to run, or
    (factor, implied_outcome) for a factor decided without running."""
    first, riskier, safer = values
    if first not in group_results:
        return first, None
    if group_results[first] == "completed":
        if riskier not in group_results:
            return riskier, None
        if safer not in group_results:
            return safer, "completed"
    else:
        if safer not in group_results:
            return safer, None
        if riskier not in group_results and group_results[first] == "oom":
            return riskier, "oom"
    return None


def validate_registry():
    """Raises ValueError when a case is malformed; run by the orchestrators and the dry-run test."""
    for name, case in CASES.items():
        for key in ("kind", "job", "params", "smoke_params", "expected", "description", "groups",
                    "timeout_s", "construction", "history"):
            if key not in case:
                raise ValueError(f"case {name} lacks {key!r}")
        if "fix" in case["groups"] and "fix_kind" not in case:
            raise ValueError(f"case {name} has a fix candidate but no fix_kind")
        if "caps" in case["groups"] and not case.get("cap_bytes"):
            raise ValueError(f"case {name} has cap candidates but no cap")
        if not case["whole_card"] and "need_bytes" not in case:
            raise ValueError(f"case {name} runs concurrently but says nothing of its need_bytes")
        candidates(name, case, 1536 * MiB)
    for name, case in LIVE_CASES.items():
        for key in ("jobs", "smoke_jobs", "expected", "expected_severity", "description"):
            if key not in case:
                raise ValueError(f"live case {name} lacks {key!r}")
